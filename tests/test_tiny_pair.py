"""The trained tiny pair that ships with the package, and the tools that rebuild it (tools/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from draft_head_fp8.tiny import shipped_pair  # noqa: E402
from draft_head_fp8.tiny.gemma4 import DRAFT_HIDDEN, TARGET_HIDDEN, VOCAB  # noqa: E402
from tools import corpus, draft_replay, train_tiny_pair  # noqa: E402

PAIR = shipped_pair()
ROOT = Path(__file__).resolve().parent.parent


def _load_pair():
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    target = Gemma4ForCausalLM.from_pretrained(PAIR.target, dtype=torch.bfloat16)
    assistant = Gemma4AssistantForCausalLM.from_pretrained(PAIR.assistant, dtype=torch.bfloat16)
    return target.eval(), assistant.eval()


def test_shipped_pair_files_are_small_and_complete():
    total = 0
    for folder in (PAIR.target, PAIR.assistant):
        for name in (
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
        ):
            assert (folder / name).is_file(), f"{folder / name} is missing"
        total += sum(p.stat().st_size for p in folder.iterdir())
    assert total < 5 * 1024 * 1024
    # Both halves carry the same tokenizer, byte for byte.
    assert (PAIR.target / "tokenizer.json").read_bytes() == (
        PAIR.assistant / "tokenizer.json"
    ).read_bytes()


def test_shipped_pair_loads_with_expected_config():
    from transformers import AutoTokenizer

    target, assistant = _load_pair()
    tc = target.config
    assert tc.model_type == "gemma4_text"
    assert (tc.vocab_size, tc.hidden_size, tc.num_hidden_layers) == (VOCAB, TARGET_HIDDEN, 2)
    assert list(tc.layer_types) == ["sliding_attention", "full_attention"]
    ac = assistant.config
    assert ac.model_type == "gemma4_assistant"
    assert ac.backbone_hidden_size == TARGET_HIDDEN
    assert ac.use_ordered_embeddings is False
    assert ac.tie_word_embeddings is True
    text = ac.get_text_config()
    assert (text.vocab_size, text.hidden_size) == (VOCAB, DRAFT_HIDDEN)
    # The draft head is tied to the draft-dim embedding (what vLLM quantizes from).
    assert assistant.lm_head.weight.data_ptr() == assistant.model.embed_tokens.weight.data_ptr()
    assert assistant.lm_head.weight.shape == (VOCAB, DRAFT_HIDDEN)
    assert assistant.lm_head.weight.dtype == torch.bfloat16
    tok = AutoTokenizer.from_pretrained(PAIR.target)
    assert [tok.convert_tokens_to_ids(t) for t in ("<pad>", "<eos>", "<bos>", "<unk>")] == [
        0,
        1,
        2,
        3,
    ]
    assert len(tok) == VOCAB


def test_shipped_pair_training_record():
    record = json.loads((ROOT / "tools" / "tiny_pair_training.json").read_text())
    assert record["schema"] == "draft-head-fp8-tiny-pair-training/v1"
    assert record["target"]["stopped_by_time_cap"] is False
    assert record["assistant"]["stopped_by_time_cap"] is False
    assert record["target"]["steps"] == record["schedule"]["target_steps"]
    assert record["assistant"]["steps"] == record["schedule"]["assistant_steps"]
    # A trained pair: drafts are accepted far above chance (random weights accept ~0).
    assert record["evaluation_bf16_weights"]["offline_acceptance"]["acceptance_rate"] > 0.3


def test_shipped_assistant_drafts_the_target():
    """Offline greedy speculative decoding on one held-out prompt: drafts are accepted."""
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    target, assistant = _load_pair()
    target, assistant = target.float(), assistant.float()
    tok = AutoTokenizer.from_pretrained(PAIR.target)
    prompts = corpus.heldout_prompts(
        tok, corpus.stdlib_docstring_corpus(), count=2, prompt_tokens=16
    )
    stats = draft_replay.offline_acceptance(
        target, assistant, prompts, new_tokens=24, steps=draft_replay.DRAFT_STEPS
    )
    assert stats["num_drafts"] > 0
    assert stats["acceptance_rate"] > 0.2


def test_heldout_split_is_disjoint_and_stable():
    a = corpus.stdlib_docstring_corpus()
    b = corpus.stdlib_docstring_corpus()
    assert a == b
    assert a.heldout and a.train
    # Split by file: only docstrings repeated verbatim in several files (e.g. boilerplate) overlap.
    overlap = set(a.heldout) & set(a.train)
    assert len(overlap) <= 0.05 * len(set(a.heldout))


def test_draft_masks_follow_vllm_kv_sharing():
    """A draft query at target position i sees target K/V 0..i (and, sliding, the last window)."""
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    from draft_head_fp8.tiny.gemma4 import assistant_config, target_config

    torch.manual_seed(0)
    target = Gemma4ForCausalLM(target_config()).eval()
    assistant = Gemma4AssistantForCausalLM(assistant_config()).eval()
    tokens = torch.randint(4, VOCAB, (1, 12))
    with torch.no_grad():
        tp = draft_replay.target_pass(target, tokens)
        full, _ = draft_replay.unrolled_draft(assistant, target, tokens, tp, 1)
        # The query at position 5 alone, against a target pass that only ever saw tokens 0..6.
        short = tokens[:, :7]
        tp_short = draft_replay.target_pass(target, short)
        one, _ = draft_replay.unrolled_draft(
            assistant, target, short, tp_short, 1, torch.tensor([[5]])
        )
    torch.testing.assert_close(one[0][0, 0], full[0][0, 5], rtol=1e-4, atol=1e-4)


def test_train_main_runs_end_to_end(tmp_path):
    out = tmp_path / "pair"
    code = train_tiny_pair.main(
        [
            str(out),
            "--target-steps",
            "2",
            "--assistant-steps",
            "2",
            "--batch",
            "2",
            "--generated-rows",
            "2",
            "--queries-per-row",
            "4",
            "--eval-prompts",
            "1",
        ]
    )
    assert code == 0
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    Gemma4ForCausalLM.from_pretrained(out / "target")
    Gemma4AssistantForCausalLM.from_pretrained(out / "assistant")
    record = json.loads((out / "training.json").read_text())
    assert record["target"]["steps"] == 2 and record["assistant"]["steps"] == 2
    assert (out / "target" / "tokenizer.json").is_file()
    with pytest.raises(FileExistsError):
        train_tiny_pair.train_pair(out)
