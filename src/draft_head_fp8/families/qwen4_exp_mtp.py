"""Qwen4-Exp MTP drafters: vLLM's ``Qwen4ExpMTP`` (``vllm/models/qwen4_exp/nvidia/mtp.py``; the
platform entry ``vllm.models.qwen4_exp`` imports it everywhere but ROCm) reads its head as
Qwen3-Next's does: the MTP layer ships inside the target's checkpoint (``mtp.*``: a Qwen4-Exp
decoder layer, two projections, two norms and a final hyper-connection mixer), and the draft
reads the target's head through ``lm_head``, replaced by the target's at the share; what differs
is data: vLLM's class, the model types, and the MTP layer count (``mtp_num_hidden_layers``, else
``num_nextn_predict_layers``: vLLM's config rewrite reads either).

- vLLM rewrites a ``qwen4_exp`` or ``qwen4_exp_text`` config to it, run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there. The drafter hands the head the final mixer's one stream, not the
  hyper-connection streams it keeps for its next step.
- A target's gated-delta-net layers run without prefix caching on a CPU, as Qwen3.5's; its model
  file imports torchvision (through ``qwen3_vl.py``): the engine test runs with the stand-in.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import config_value
from draft_head_fp8.families.target_head import mtp_family

NEXTN = "num_nextn_predict_layers"


def without_mtp_layers(config: Any) -> str | None:
    """vLLM counts Qwen4-Exp's MTP layers in ``mtp_num_hidden_layers``, else in
    ``num_nextn_predict_layers`` (the text config's, in a multimodal checkpoint): the field it
    reads says none."""
    field = "mtp_num_hidden_layers"
    if config_value(config, field) is None and config_value(config, NEXTN) is not None:
        field = NEXTN
    if not config_value(config, field, 0):
        return f"the checkpoint has no MTP layers ({field} is 0 or missing)"
    return None


FAMILY = mtp_family(
    name="qwen4-exp-mtp",
    title="Qwen4-Exp MTP",
    drafters={"Qwen4ExpMTP": "vllm.models.qwen4_exp.nvidia.mtp:Qwen4ExpMTP"},
    model_types=("qwen4_exp", "qwen4_exp_text", "qwen4_exp_mtp"),
    hf_architectures=("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP"),
    tiny="draft_head_fp8.tiny.qwen4_exp_mtp",
    refusal=without_mtp_layers,
    draft_prefixes=lambda config: ("mtp.",),
    cpu_engine_options={"enable_prefix_caching": False},
)
