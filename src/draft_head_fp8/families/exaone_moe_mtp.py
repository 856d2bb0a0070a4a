"""K-EXAONE (EXAONE MoE) MTP drafters: the MTP layer ships inside the target's checkpoint
(``mtp.layers.0.*`` and its glue ``mtp.{fc,norm,pre_fc_norm_hidden,pre_fc_norm_embedding}``),
and the draft reads the target's head through ``lm_head``, as Qwen3.5's does (``qwen3_5_mtp``);
what differs is data: vLLM's class, the model types, the MTP layer's names.

- vLLM: ``ExaoneMoeMTP`` (``model_executor/models/exaone_moe_mtp.py``, architecture
  ``ExaoneMoeMTP``; vLLM rewrites an ``exaone_moe`` config to it, its MTP layer count read from
  ``num_nextn_predict_layers``), run with ``speculative_config={"method": "mtp", "model":
  <target>}``. Its MTP layer is an EXAONE MoE decoder layer built dense (``is_mtp``).
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head). The drafter loads a BF16 copy into its own ``ParallelLMHead``; vLLM's proposer replaces
  it by the target's at the share, so the private FP8 head is made there. vLLM 0.34 builds the
  target's head with no prefix: the private head is named ``lm_head``
  (``vllm_plugin.shared_head.draft_prefix``).
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="exaone-moe-mtp",
    title="K-EXAONE (EXAONE MoE) MTP",
    drafters={"ExaoneMoeMTP": "vllm.model_executor.models.exaone_moe_mtp:ExaoneMoeMTP"},
    model_types=("exaone_moe", "exaone_moe_mtp"),
    # vLLM's registry spells the target both ways.
    hf_architectures=("ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeMTP"),
    tiny="draft_head_fp8.tiny.exaone_moe_mtp",
    draft_prefixes=lambda config: ("mtp.",),
)
