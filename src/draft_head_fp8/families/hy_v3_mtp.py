"""Hy3 (HY V3) MTP drafters: the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers}.*``, DeepSeek's layout: its decoder block beside ``enorm``,
``hnorm``, ``eh_proj`` and ``final_layernorm``), and the draft reads the target's head through
the MTP layer's ``shared_head.head``, as GLM-4.7-Flash's does (``glm4_moe_lite_mtp``); what
differs is data: vLLM's class and the model types.

- vLLM: ``HYV3MTP`` (``model_executor/models/hy_v3_mtp.py``, architecture ``HYV3MTPModel``;
  vLLM rewrites a ``hy_v3`` config to it, its MTP layer count read from
  ``num_nextn_predict_layers``), run with ``speculative_config={"method": "mtp", "model":
  <target>}``. Its logits come from the MTP layer's ``shared_head.head``, loaded from the
  target's ``lm_head.weight`` and replaced by the target's head at the share; it has no
  ``lm_head`` of its own until vLLM's proposer registers the target's there.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head), handed over at the share; the private FP8 head is made there and given to every
  reference.
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="hy-v3-mtp",
    title="Hy3 (HY V3) MTP",
    drafters={"HYV3MTPModel": "vllm.model_executor.models.hy_v3_mtp:HYV3MTP"},
    model_types=("hy_v3", "hy_v3_mtp"),
    hf_architectures=("HYV3ForCausalLM", "HYV3MTPModel"),
    tiny="draft_head_fp8.tiny.hy_v3_mtp",
)
