"""Drafters no family serves refuse to start with the flag on (vllm_plugin.unserved): the pure
reason, which architectures get a refusing class, and that class refusing before any weight
exists, with its architecture's verdict (test_registry_verdicts.py judges every one). The engine
test is in test_shared_head_families (a Qwen3 EAGLE-3 draft)."""

from __future__ import annotations

import pytest

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.families import all_families
from draft_head_fp8.policy import unserved_drafter

SERVED = sorted({a for family in all_families() for a in family.drafters})


def test_the_reason_names_the_drafter_what_is_served_and_the_way_out():
    assert unserved_drafter("Eagle3Qwen3ForCausalLM", ["B", "A"]) == (
        "Eagle3Qwen3ForCausalLM is not a drafter this package serves (its head would serve in "
        "BF16, with no receipt); served: A, B; unset VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8 to serve it "
        "as vLLM does"
    )


def test_the_reason_says_why_in_the_architectures_own_verdict():
    assert unserved_drafter("MedusaModel", ["A"], "drafts through several heads (lm_heads[])") == (
        "MedusaModel is not a drafter this package serves (its head would serve in BF16, with no "
        "receipt): drafts through several heads (lm_heads[]); served: A; unset "
        "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8 to serve it as vLLM does"
    )


def test_every_speculative_architecture_vllm_knows_is_served_or_refused():
    from draft_head_fp8.vllm_plugin import seams, unserved

    refused = unserved.architectures()
    # EAGLE-3 for Llama, Qwen3 and DeepSeek is served; P-EAGLE's parallel drafting (the same
    # classes) and Cohere's embedding head refuse.
    assert {"Eagle3LlamaForCausalLM", "Eagle3Qwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM"} <= (
        set(SERVED)
    )
    assert {"PEagleDraftModel", "PeagleQwen3ForCausalLM", "EagleCohereForCausalLM"} <= set(refused)
    assert not set(refused) & set(SERVED)
    # Every one this vLLM knows; a record may name one a later release adds (0.34's Ricursive).
    known = set(seams.read("speculative_models"))
    assert set(refused) | (set(SERVED) & known) == known
    assert refused["PeagleQwen3ForCausalLM"] == (
        "vllm.model_executor.models.qwen3_eagle3:Eagle3Qwen3ForCausalLM"
    )


def test_the_refusing_class_is_vllms_and_refuses_at_construction(capsys):
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    from draft_head_fp8.vllm_plugin import unserved

    # P-EAGLE's parallel drafting: vLLM's EAGLE-3 Llama class, but no family claims it.
    cls = unserved.refusing_class("DraftHeadFp8UnservedPEagleDraftModel")
    assert issubclass(cls, Eagle3LlamaForCausalLM)
    with pytest.raises(HeadFp8EligibilityError) as refused:
        cls(vllm_config=None)
    # Its own verdict's reason (registry_facts), after the prefix users match on.
    from draft_head_fp8.vllm_plugin import registry_facts

    why = registry_facts.verdict("PEagleDraftModel").reason
    assert why.startswith("drafts every token in one pass (P-EAGLE parallel drafting)")
    assert str(refused.value) == unserved_drafter("PEagleDraftModel", SERVED, why)
    assert capsys.readouterr().err == f"draft-head-fp8: refusing to start: {refused.value}\n"
    with pytest.raises(AttributeError, match="no class 'DraftHeadFp8UnservedEagleLlama"):
        unserved.refusing_class("DraftHeadFp8UnservedEagleLlamaForCausalLM")  # served: a family's
