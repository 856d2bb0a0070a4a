"""The trained tiny Llama EAGLE-1 pair that ships with the package (family ``llama-eagle1``), and
the tools that rebuild it (``tools/train_eagle_pair.py``, ``tools/eagle_replay.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from draft_head_fp8.tiny import TinyPair, build, shipped_pair  # noqa: E402
from draft_head_fp8.tiny.common import WEIGHTS  # noqa: E402
from tools import corpus, draft_replay, eagle_replay, train_eagle_pair  # noqa: E402

PAIR = shipped_pair("llama-eagle1")
ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tools" / "tiny_eagle1_pair_training.json"
# What vLLM 0.32's EagleLlamaForCausalLM.load_weights reads from an EAGLE-1 draft: its one layer
# without the input norm (layer 0 is built with nn.Identity there), and fc. An lm_head or
# embed_tokens tensor would make vLLM keep the draft's own instead of sharing the target's.
VLLM_DRAFT_TENSORS = {
    "fc.weight",
    "layers.0.post_attention_layernorm.weight",
    *(f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"),
    *(f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
}


def _tensors(folder: Path) -> dict:
    from safetensors import safe_open

    with safe_open(folder / WEIGHTS, "pt") as f:
        return {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_shipped_eagle_pair_is_small_and_shares_the_tokenizer():
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


def test_shipped_eagle_pair_has_the_random_builders_layout(tmp_path):
    """Same configs, tensor names, shapes and dtypes as ``tiny.build("llama-eagle1")`` (whose
    layout the engine tests load), and a draft of exactly what vLLM reads."""
    random = build("llama-eagle1", tmp_path / "random")
    for shipped, built in ((PAIR.target, random.target), (PAIR.assistant, random.assistant)):
        assert _config(shipped) == _config(built)
        assert _tensors(shipped) == _tensors(built)
    draft = _tensors(PAIR.assistant)
    assert set(draft) == VLLM_DRAFT_TENSORS
    assert draft["fc.weight"] == ("BF16", [128, 256])
    assert "lm_head.weight" in _tensors(PAIR.target)  # untied: the head the draft shares


def test_shipped_eagle_pair_loads_in_transformers():
    from transformers import AutoConfig, LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(PAIR.target, dtype=torch.bfloat16)
    assert target.config.num_hidden_layers == 2 and not target.config.tie_word_embeddings
    draft_config = AutoConfig.from_pretrained(PAIR.assistant)
    assert draft_config.model_type == "llama" and draft_config.num_hidden_layers == 1
    draft = eagle_replay.load_draft(PAIR.assistant)
    assert draft["fc"].weight.shape == (128, 256)


def test_record_acceptance_is_recomputed_from_the_shipped_weights():
    """The offline acceptance in the training record is what the replay computes from the files
    that ship, on the same held-out prompts: the record cannot drift from the weights."""
    from transformers import AutoTokenizer

    record = json.loads(RECORD.read_text())
    assert record["family"] == "llama-eagle1"
    assert not record["target"]["stopped_by_time_cap"]
    assert not record["assistant"]["stopped_by_time_cap"]
    evaluation = record["evaluation_bf16_weights"]
    setup = evaluation["offline_acceptance_setup"]
    torch.set_num_threads(1)
    target, draft = eagle_replay.load_pair(PAIR)
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
        replay=eagle_replay,
    )
    assert stats == evaluation["offline_acceptance"]
    # Trained: drafts are accepted (random weights accept almost none).
    assert stats["accepted_per_position"][0] > 0.2


def test_replay_is_a_llama_layer_over_the_sequence_vllm_builds():
    """Step k of the proposal after position i equals one Llama decoder layer (input norm removed)
    run causally over the sequence vLLM's draft KV cache holds then: first-pass inputs
    fc(cat(E(t[p+1]), h_p)) at positions 0..i, then the earlier steps' inputs at i+1 .. i+k-1."""
    from transformers import LlamaForCausalLM

    from draft_head_fp8.tiny.llama_eagle1 import config

    torch.manual_seed(0)
    target = LlamaForCausalLM(config(2)).eval()
    draft = eagle_replay.new_draft().eval()
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        tokens = torch.randint(4, 2048, (1, 12))
        tp = eagle_replay.target_pass(target, tokens)
        logits, _ = eagle_replay.unrolled_draft(draft, target, tokens, tp, 3)
        embed = target.model.embed_tokens
        layer = draft["layer"]
        layer.input_layernorm = torch.nn.Identity()
        i, out = 6, None
        seq = draft["fc"](torch.cat([embed(tokens[:, 1 : i + 2]), tp.hidden[:, : i + 1]], -1))
        for k in range(1, 4):
            if k > 1:
                step = torch.cat([embed(tokens[:, i + k : i + k + 1]), out[:, -1:]], -1)
                seq = torch.cat([seq, draft["fc"](step)], 1)
            n = seq.shape[1]
            positions = torch.arange(n).unsqueeze(0)
            causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
            out = layer(
                seq,
                attention_mask=causal,
                position_ids=positions,
                position_embeddings=draft["rotary"](seq, positions),
            )
            torch.testing.assert_close(
                logits[k - 1][0, i], target.lm_head(out[0, -1]), rtol=1e-4, atol=1e-4
            )


def test_train_eagle_main_runs_end_to_end(tmp_path):
    out = tmp_path / "pair"
    args = ["--target-steps", "2", "--assistant-steps", "2", "--batch", "2"]
    args += ["--generated-rows", "2", "--queries-per-row", "4", "--eval-prompts", "1"]
    assert train_eagle_pair.main([str(out), *args]) == 0
    assert set(_tensors(out / "assistant")) == VLLM_DRAFT_TENSORS
    record = json.loads((out / "training.json").read_text())
    assert record["family"] == "llama-eagle1"
    assert record["target"]["steps"] == 2 and record["assistant"]["steps"] == 2
    eagle_replay.load_pair(TinyPair(target=out / "target", assistant=out / "assistant"))
    with pytest.raises(FileExistsError):
        train_eagle_pair.main([str(out), *args])
