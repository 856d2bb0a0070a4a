"""Qwen3 DFlash drafters: vLLM's ``DFlashQwen3ForCausalLM`` (``model_executor/models/
qwen3_dflash.py``), a Qwen3 decoder stack that drafts a whole block in one non-causal pass: the
target's hidden states (``fc`` over its ``target_layer_ids``) become context K/V, and the
block's query slots (the anchor, then ``mask_token_id``) come out as one hidden state per draft
position. vLLM's ``DFlashSpeculator`` (Model Runner V2; ``v1/worker/gpu/spec_decode/dflash/``)
hands the head every request's every position in one call and drafts the argmax of each row
(``sample_draft`` -> ``compute_draft_logits`` -> ``greedy_argmax``): no term, no step after the
head, so the FP8 head's certified pick, made for every row of the call, is the draft token of
every position of the block.

- vLLM builds it for a draft config naming ``DFlashDraftModel``, or Muse Glimmer's
  ``MuseGlimmerAssistantModel`` (``DFlashMuseGlimmerAssistantModel`` after vLLM's
  ``EAGLEConfig`` prefixes ``DFlash``): one class, so one family, under
  ``speculative_config={"method": "dflash"}``.
- The head: the target's ``lm_head``, shared at load (``load_dflash_model``) when the draft
  checkpoint has none, as for EAGLE-1; the private FP8 head is made at that share. A draft with
  a head of its own keeps it (vLLM's ``has_own_lm_head``, from its checkpoint or its config):
  refused when its config says so (``refusal``); from a checkpoint's ``lm_head`` there is no
  share, so no receipt, and the drafter refuses to draft.
- A vocabulary of its own (``draft_vocab_size`` and ``d2t``) is refused at the share by the
  policy, as for every family that reads the target's head.
- Refused (``refusal``): a ``logit_scale`` other than 1 (vLLM's logits processor multiplies the
  certified logits after the head, in their dtype, which can round the tail onto the pick).
- Runs on vLLM 0.34's engine with a tiny Qwen3 target (``tiny/qwen3_dflash.py``). Muse Glimmer's
  architecture names the same class; its checkpoints (model type ``muse_glimmer_assistant``,
  a Muse Glimmer target) are served by this record and not engine-tested here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import DRAFT, Family, config_value, top_value
from draft_head_fp8.families.qwen3_dspark import TERM_TENSOR
from draft_head_fp8.families.target_head import TARGET_HEAD, own_head_refusal, policy_inputs

VLLM_CLASS = "vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM"
ARCHITECTURES = (
    "DFlashDraftModel",
    "MuseGlimmerAssistantModel",
    "DFlashMuseGlimmerAssistantModel",
)


def refusal(config: Any) -> str | None:
    own = own_head_refusal(config, "DFlash")
    if own:
        return own
    scale = top_value(config, "logit_scale", 1.0)
    if float(scale) != 1.0:
        return (
            f"DFlash with logit_scale={scale}: vLLM's logits processor scales the head's logits "
            "after the certified pick, and rounding in their dtype can bring a clamped logit up "
            "to the pick's; the pick is proven for the head's logits as they are"
        )
    return None


def recognise(config: Any, folder: Path) -> bool:
    """A DFlash draft: its config names the mask token its block's query slots are fed (a
    Qwen3 target and an EAGLE-3 draft name none), and its folder holds no Markov term (a DSpark
    draft, the same backbone, does)."""
    from draft_head_fp8.checkpoint import has_tensor

    flash = config_value(config, "dflash_config") or {}
    masked = flash.get("mask_token_id") if isinstance(flash, dict) else None
    if masked is None:
        masked = top_value(config, "mask_token_id")
    return masked is not None and not has_tensor(folder, TERM_TENSOR)  # a DSpark draft's


FAMILY = Family(
    name="qwen3-dflash",
    title="Qwen3 DFlash",
    drafters={architecture: VLLM_CLASS for architecture in ARCHITECTURES},
    speculative_method="dflash",
    config_from=DRAFT,
    model_types=("qwen3", "muse_glimmer_assistant"),
    hf_architectures=ARCHITECTURES,
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.qwen3_dflash",
    policy_inputs=policy_inputs,
    refusal=refusal,
    recognise=recognise,
    drafts_block=True,
)
