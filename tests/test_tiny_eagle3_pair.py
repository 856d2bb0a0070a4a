"""The trained tiny Llama EAGLE-3 pair that ships with the package (family ``llama-eagle3``), and
the tools that rebuild it (``tools/train_eagle3_pair.py``, ``tools/eagle3_replay.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from draft_head_fp8.tiny import TinyPair, build, shipped_pair  # noqa: E402
from draft_head_fp8.tiny.common import WEIGHTS  # noqa: E402
from draft_head_fp8.tiny.llama_eagle3 import DRAFT_VOCAB, HIDDEN, VOCAB  # noqa: E402
from tools import corpus, draft_replay, eagle3_replay, train_eagle3_pair  # noqa: E402

PAIR = shipped_pair("llama-eagle3")
ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tools" / "tiny_eagle3_pair_training.json"
# What vLLM 0.32's Eagle3LlamaForCausalLM.load_weights reads from an EAGLE-3 draft with its own
# head: midlayer.* (renamed layers.0.*), fc, norm, lm_head and d2t; it skips t2d. An embed_tokens
# tensor would make vLLM keep the draft's own embedding instead of sharing the target's.
VLLM_DRAFT_TENSORS = {
    "fc.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
    *(f"midlayer.{n}_layernorm.weight" for n in ("input", "post_attention")),
    "midlayer.hidden_norm.weight",
    *(f"midlayer.self_attn.{p}_proj.weight" for p in "qkvo"),
    *(f"midlayer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
}


def _tensors(folder: Path) -> dict:
    from safetensors import safe_open

    with safe_open(folder / WEIGHTS, "pt") as f:
        return {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _draft_ids() -> torch.Tensor:
    from safetensors.torch import load_file

    return torch.arange(DRAFT_VOCAB) + load_file(PAIR.assistant / WEIGHTS)["d2t"]


def test_shipped_eagle3_pair_is_small_and_shares_the_tokenizer():
    total = 0
    for folder in (PAIR.target, PAIR.assistant):
        for name in ("config.json", WEIGHTS, "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json"):  # fmt: skip
            assert (folder / name).is_file(), f"{folder / name} is missing"
        total += sum(p.stat().st_size for p in folder.iterdir())
    assert total < 5 * 1024 * 1024
    # One tokenizer for every tiny pair: byte for byte the Gemma pair's.
    gemma = shipped_pair("gemma4-mtp")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (PAIR.target / name).read_bytes() == (gemma.target / name).read_bytes()
        assert (PAIR.assistant / name).read_bytes() == (gemma.target / name).read_bytes()


def test_shipped_eagle3_pair_has_the_random_builders_layout(tmp_path):
    """Same configs, tensor names, shapes and dtypes as ``tiny.build("llama-eagle3")`` (its own
    head over the draft vocabulary, whose layout the engine tests load), and a draft of exactly
    what vLLM reads."""
    random = build("llama-eagle3", tmp_path / "random")
    for shipped, built in ((PAIR.target, random.target), (PAIR.assistant, random.assistant)):
        assert _config(shipped) == _config(built)
        assert _tensors(shipped) == _tensors(built)
    draft = _tensors(PAIR.assistant)
    assert set(draft) == VLLM_DRAFT_TENSORS
    assert draft["fc.weight"] == ("BF16", [HIDDEN, 3 * HIDDEN])
    assert draft["lm_head.weight"] == ("BF16", [DRAFT_VOCAB, HIDDEN])
    assert _config(PAIR.assistant)["draft_vocab_size"] == DRAFT_VOCAB
    assert "lm_head.weight" in _tensors(PAIR.target)  # untied


def test_the_draft_vocabulary_is_the_most_frequent_training_tokens():
    """``d2t`` keeps id order, ``t2d`` marks the same ids, and they are ``vocabulary()`` of the
    training rows: the special ids and the most frequent tokens, recomputed here."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    ids = _draft_ids()
    assert bool((ids[1:] > ids[:-1]).all()) and {0, 1, 2} <= set(ids.tolist())
    t2d = load_file(PAIR.assistant / WEIGHTS)["t2d"]
    assert t2d.nonzero().squeeze(-1).tolist() == ids.tolist()
    tokenizer = AutoTokenizer.from_pretrained(PAIR.target)
    train = corpus.pack(corpus.encode_documents(tokenizer, corpus.stdlib_docstring_corpus().train))
    assert train_eagle3_pair.vocabulary(train).tolist() == ids.tolist()


def test_shipped_eagle3_pair_loads_in_transformers():
    from transformers import AutoConfig, LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(PAIR.target, dtype=torch.bfloat16)
    assert target.config.num_hidden_layers == 3 and not target.config.tie_word_embeddings
    draft_config = AutoConfig.from_pretrained(PAIR.assistant)
    assert draft_config.model_type == "llama" and draft_config.num_hidden_layers == 1
    draft = eagle3_replay.load_draft(PAIR.assistant)
    assert draft["fc"].weight.shape == (HIDDEN, 3 * HIDDEN)
    assert draft["lm_head"].target_ids.tolist() == _draft_ids().tolist()


def test_record_acceptance_is_recomputed_from_the_shipped_weights():
    """The offline acceptance in the training record is what the replay computes from the files
    that ship, on the same held-out prompts: the record cannot drift from the weights."""
    from transformers import AutoTokenizer

    record = json.loads(RECORD.read_text())
    assert record["family"] == "llama-eagle3"
    assert not record["target"]["stopped_by_time_cap"]
    assert not record["assistant"]["stopped_by_time_cap"]
    evaluation = record["evaluation_bf16_weights"]
    setup = evaluation["offline_acceptance_setup"]
    torch.set_num_threads(1)
    target, draft = eagle3_replay.load_pair(PAIR)
    prompts = corpus.heldout_prompts(
        AutoTokenizer.from_pretrained(PAIR.target),
        corpus.stdlib_docstring_corpus(),
        count=setup["prompts"],
        prompt_tokens=setup["prompt_tokens"],
    )
    stats = draft_replay.offline_acceptance(
        target,
        draft,
        prompts,
        new_tokens=setup["new_tokens"],
        steps=draft_replay.DRAFT_STEPS,
        replay=eagle3_replay,
    )
    assert stats == evaluation["offline_acceptance"]
    # Trained: drafts are accepted (random weights accept none).
    assert stats["accepted_per_position"][0] > 0.3


def test_aux_hidden_states_are_the_inputs_of_vllms_default_layers():
    """vLLM's default auxiliary layers ``(2, n // 2, n - 3)``, sorted and unique, and what
    ``LlamaModel`` collects there: ``hidden_states + residual`` entering each such layer (layer
    0: the embedding), joined in layer order."""
    from transformers import LlamaForCausalLM

    from draft_head_fp8.tiny.llama_eagle3 import target_config

    assert eagle3_replay.aux_layers(3) == (0, 1, 2)
    assert eagle3_replay.aux_layers(32) == (2, 16, 29)  # Llama 3.1 8B's published EAGLE-3
    torch.manual_seed(0)
    target = LlamaForCausalLM(target_config()).eval()
    tokens = torch.randint(4, VOCAB, (2, 9))
    with torch.no_grad():
        h = target.model.embed_tokens(tokens)
        positions = torch.arange(9).unsqueeze(0)
        rotary = target.model.rotary_emb(h, positions)
        causal = torch.full((9, 9), float("-inf")).triu(1)[None, None]
        inputs = [h]
        for layer in target.model.layers[:2]:
            h = layer(h, attention_mask=causal, position_ids=positions, position_embeddings=rotary)
            inputs.append(h)
        tp = eagle3_replay.target_pass(target, tokens)
    torch.testing.assert_close(tp.hidden, torch.cat(inputs, dim=-1), rtol=1e-5, atol=1e-5)


def test_replay_is_the_eagle3_layer_over_the_sequence_vllm_builds():
    """Step k of the proposal after position i equals vLLM's EAGLE-3 layer run causally (with
    transformers' attention) over the sequence the draft KV cache holds then: first-pass inputs
    cat(input_layernorm(E(t[p+1])), hidden_norm(fc(aux_p))) at positions 0..i, then the earlier
    steps' inputs at i+1 .. i+k-1, each step's hidden the previous one's pre-norm output; logits
    the own head's, at the draft ids, -inf elsewhere."""
    from transformers import LlamaForCausalLM

    from draft_head_fp8.tiny.llama_eagle3 import target_config

    torch.manual_seed(0)
    target = LlamaForCausalLM(target_config()).eval()
    ids = torch.arange(0, VOCAB, 2)
    draft = eagle3_replay.new_draft(ids).eval()
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        tokens = torch.randint(4, VOCAB, (1, 12))
        tp = eagle3_replay.target_pass(target, tokens)
        logits, _ = eagle3_replay.unrolled_draft(draft, target, tokens, tp, 3)
        embed, layer = target.model.embed_tokens, draft["layer"]

        def step_input(tok, hidden):
            return torch.cat([layer.input_layernorm(embed(tok)), layer.hidden_norm(hidden)], -1)

        i, pre = 6, None
        residual = draft["fc"](tp.hidden[:, : i + 1])
        seq = step_input(tokens[:, 1 : i + 2], residual)
        for k in range(1, 4):
            if k > 1:
                seq = torch.cat([seq, step_input(tokens[:, i + k : i + k + 1], pre[:, -1:])], 1)
                residual = torch.cat([residual, pre[:, -1:]], 1)
            n = seq.shape[1]
            positions = torch.arange(n).unsqueeze(0)
            causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
            attended, _ = layer.self_attn(
                seq, position_embeddings=draft["rotary"](seq, positions), attention_mask=causal
            )
            r = residual + attended
            pre = r + layer.mlp(layer.post_attention_layernorm(r))
            own = draft["lm_head"](draft["norm"](pre[0, -1]))
            got = logits[k - 1][0, i]
            torch.testing.assert_close(got[ids], own, rtol=1e-4, atol=1e-4)
            assert bool(torch.isinf(got).sum() == VOCAB - len(ids))


def test_train_eagle3_main_runs_end_to_end(tmp_path):
    out = tmp_path / "pair"
    args = ["--target-steps", "2", "--assistant-steps", "2", "--batch", "2"]
    args += ["--generated-rows", "2", "--queries-per-row", "4", "--eval-prompts", "1"]
    assert train_eagle3_pair.main([str(out), *args]) == 0
    assert set(_tensors(out / "assistant")) == VLLM_DRAFT_TENSORS
    record = json.loads((out / "training.json").read_text())
    assert record["family"] == "llama-eagle3"
    assert record["target"]["steps"] == 2 and record["assistant"]["steps"] == 2
    eagle3_replay.load_pair(TinyPair(target=out / "target", assistant=out / "assistant"))
    with pytest.raises(FileExistsError):
        train_eagle3_pair.main([str(out), *args])
