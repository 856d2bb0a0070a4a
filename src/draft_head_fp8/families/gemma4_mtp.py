"""Gemma 4 MTP assistants: a separate assistant checkpoint whose own head is tied to its own
(draft-width) embedding.

- vLLM: ``Gemma4MTP`` (``model_executor/models/gemma4_mtp.py``, architecture ``Gemma4MTPModel``;
  vLLM rewrites the assistant's ``gemma4_assistant`` model type to ``gemma4_mtp``), run with
  ``speculative_config={"method": "mtp", "model": <assistant>}``.
- The head's bytes: vLLM never loads ``lm_head.weight`` for this drafter; the head is tied to
  the assistant's ``model.embed_tokens.weight``, which is loaded with the drafter. So they exist
  at load, and the FP8 copy is made then.
- The share: after load, vLLM's ``Gemma4Proposer`` replaces the draft's ``embed_tokens`` by the
  target's and keeps the draft's own head; the plugin sees ``embed_tokens`` registered on the
  draft's inner model, and proves the head right there.
- Refused: centroid heads (``use_ordered_embeddings``, the E2B/E4B assistants) and untied heads.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import AT_LOAD, DRAFT, Family, HeadSource, top_value


def policy_inputs(config: Any) -> dict[str, Any]:
    return {
        # The assistant's own fields (its text_config has defaults of its own).
        "ordered_embeddings": bool(top_value(config, "use_ordered_embeddings", False)),
        "tie_word_embeddings": bool(top_value(config, "tie_word_embeddings", True)),
    }


FAMILY = Family(
    name="gemma4-mtp",
    title="Gemma 4 MTP assistant",
    drafters={"Gemma4MTPModel": "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"},
    speculative_method="mtp",
    config_from=DRAFT,
    model_types=("gemma4_assistant", "gemma4_mtp"),
    hf_architectures=("Gemma4AssistantForCausalLM",),
    target_model_types=("gemma4", "gemma4_text"),
    head=HeadSource(
        folder=DRAFT,
        tensor="model.embed_tokens.weight",
        when=AT_LOAD,
        tied_to_draft_embedding=True,
    ),
    share="embed_tokens",
    tiny="draft_head_fp8.tiny.gemma4",
    policy_inputs=policy_inputs,
    suppressed_tokens="gemma4_suppress_token_ids",
    # vLLM's layerwise update of the drafter walks its modules, which after the share include
    # the target's: it leaves them on the meta device and the next target step fails (seen with
    # the flag off on vLLM 0.32 V1 and 0.34 MRv2, tests/test_weight_updates.py).
    draft_updates_refused=(
        "after the share the assistant holds modules of the target (its embedding), and vLLM's "
        "layerwise update of the draft model reloads those too, leaving the target's layers on "
        "the meta device (the next step fails, with or without the flag)"
    ),
)
