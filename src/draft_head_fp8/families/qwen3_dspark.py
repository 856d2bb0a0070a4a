"""Qwen3 DSpark drafters: vLLM 0.34's ``Qwen3DSparkForCausalLM`` (``model_executor/models/
qwen3_dspark.py``), a DFlash Qwen3 backbone that drafts a whole block in one non-causal pass,
then a low-rank Markov term added to the head's logits, position by position, from the token
drafted just before (``markov_head``: ``markov_w1`` embeds it, ``markov_w2`` projects it to the
vocabulary through the drafter's logits processor). vLLM's ``DSparkSpeculator`` (Model Runner V2
only) picks ``argmax(head + term)``: the head's argmax alone is not the draft token.

- vLLM builds it for a draft config naming ``Qwen3DSparkModel`` (``Qwen3OmniDSparkModel`` for a
  Qwen3-Omni target, the same class; ``DSparkDraftModel`` with model type ``qwen3`` is renamed
  to ``Qwen3DSparkModel``), under ``speculative_config={"method": "dspark"}``.
- The head: the target's ``lm_head``, shared at load (``load_dspark_model`` ->
  ``share_target_lm_head``) when the draft checkpoint has none, as for EAGLE-1; the private FP8
  head is made at that share. A draft with a head of its own keeps it (vLLM's
  ``has_own_lm_head``): no share, no receipt, the drafter refuses to draft.
- The pick: made after the term (``MARKOV_TERM``, ``vllm_plugin/markov_pick.py``): the head
  serves plain FP8 logits, and each draft token is the certified pick over the BF16 head's
  logits plus vLLM's own term (``certificate_topk``; docs/certificate.md, "A term added after
  the head").
- ``dspark_draft_topk`` (vLLM takes the head's top-k alone and adds the term to those only):
  the head then hands vLLM exact top-k rows (``top_k_rows``): the certified top-k, exactly
  valued, where the k + 1 best are distinct, the whole row exactly where they tie, so that
  vLLM's own ``torch.topk`` returns what it returns over the BF16 head's logits.
- Refused (``refusal``): a ``logit_scale`` other than 1 (the certificate bounds the head's
  logits, not a scaled sum).
- Runs on vLLM 0.34's engine with a tiny Qwen3 target (``tiny/qwen3_dspark.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import DRAFT, MARKOV_TERM, Family, top_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs

VLLM_CLASS = "vllm.model_executor.models.qwen3_dspark:Qwen3DSparkForCausalLM"
ARCHITECTURES = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")
TERM_TENSOR = "markov_head.markov_w2.weight"


def refusal(config: Any) -> str | None:
    scale = top_value(config, "logit_scale", 1.0)
    if float(scale) != 1.0:
        return (
            f"DSpark with logit_scale={scale}: the exact pick after the Markov term is proven for "
            "the head's logits as they are, not scaled"
        )
    return None


def recognise(config: Any, folder: Path) -> bool:
    """A DSpark draft: its folder holds the Markov term's head (a Qwen3 target does not)."""
    from draft_head_fp8.checkpoint import has_tensor

    return has_tensor(folder, TERM_TENSOR)


FAMILY = Family(
    name="qwen3-dspark",
    title="Qwen3 DSpark",
    drafters={architecture: VLLM_CLASS for architecture in ARCHITECTURES},
    speculative_method="dspark",
    config_from=DRAFT,
    model_types=("qwen3",),
    hf_architectures=(*ARCHITECTURES, "DSparkDraftModel"),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.qwen3_dspark",
    policy_inputs=policy_inputs,
    refusal=refusal,
    recognise=recognise,
    term=MARKOV_TERM,
)
