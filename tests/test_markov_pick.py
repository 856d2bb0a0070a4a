"""What refuses a drafter that adds a Markov term to its head's logits (DSpark) at construction,
each with its reason (vllm_plugin/markov_pick.py, the family's record): the pick after the term is
proven greedy, at tensor parallel 1, certified, for the head's logits as they are. The pick itself
is tests/test_term_pick.py's; the engine pair, tests/test_shared_head_families.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from draft_head_fp8.families import by_name

pytest.importorskip("torch")
from draft_head_fp8.vllm_plugin.markov_pick import refusal  # noqa: E402

FAMILY = by_name("qwen3-dspark")


def engine(*, tp=1, sample="greedy", adaptive=False):
    """The parts of vLLM's config the refusal reads."""
    return SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=tp),
        speculative_config=SimpleNamespace(
            draft_sample_method=sample, enable_adaptive_verification=adaptive
        ),
    )


def test_greedy_at_tp1_certified_is_served():
    assert refusal(engine(), SimpleNamespace()) is None
    assert FAMILY.refusal({"vocab_size": 2048}) is None


def test_tensor_parallelism_is_refused():
    assert refusal(engine(tp=2), SimpleNamespace()).startswith(
        "a drafter that adds a Markov term to its head's logits is served at tensor parallel 1 only"
    )


@pytest.mark.parametrize("sample", ["probabilistic", "synthetic"])
def test_drafting_other_than_greedy_is_refused(sample):
    assert refusal(engine(sample=sample), SimpleNamespace()) == (
        f"{sample} drafting adds the Markov term inside vLLM's sampling kernel: only the greedy "
        "pick after the term is made exact; serve it greedy, or with the flag unset"
    )


@pytest.mark.parametrize(
    "setting", [("DRAFT_HEAD_FP8_CERTIFY", "off"), ("DRAFT_HEAD_FP8_RESCORE_TOPK", "0")]
)
def test_the_certificate_off_is_refused(monkeypatch, setting):
    monkeypatch.setenv(*setting)
    assert "is served only certified" in refusal(engine(), SimpleNamespace())


def test_adaptive_verification_needs_the_confidence_head():
    why = refusal(engine(adaptive=True), SimpleNamespace())
    assert why.startswith("adaptive verification without the drafter's confidence head")
    assert refusal(engine(adaptive=True), SimpleNamespace(enable_confidence_head=True)) is None


def test_the_family_refuses_what_the_pick_after_the_term_does_not_cover():
    assert FAMILY.refusal({"dspark_draft_topk": 4}) is None  # served: top_k_rows
    scaled = FAMILY.refusal({"logit_scale": 0.5})
    assert scaled.startswith("DSpark with logit_scale=0.5: the exact pick after the Markov term")
    assert FAMILY.refusal({"logit_scale": 1.0}) is None


def test_the_term_head_is_no_reference_to_the_draft_head():
    torch = pytest.importorskip("torch")

    class Head(torch.nn.Module):  # named and placed as vLLM's ParallelLMHead
        pass

    Head.__name__, Head.__module__ = "ParallelLMHead", "x.vocab_parallel_embedding"
    drafter = torch.nn.Module()
    drafter.lm_head = Head()
    drafter.model = torch.nn.Module()
    drafter.model.markov_head = torch.nn.Module()
    drafter.model.markov_head.markov_w2 = Head()
    assert [path for path, _ in FAMILY.draft_heads(drafter)] == ["lm_head"]
    assert [path for path, _ in by_name("llama-eagle1").draft_heads(drafter)] == [
        "lm_head",
        "model.markov_head.markov_w2",
    ]
