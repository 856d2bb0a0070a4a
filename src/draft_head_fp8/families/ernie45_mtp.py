"""ERNIE-4.5 MoE MTP drafters: the MTP layer ships inside the target's checkpoint
(``model.mtp_block.0.*`` and its glue ``model.mtp_{emb_norm,hidden_norm,linear_proj}.0.*``),
and the draft reads the target's head through ``lm_head``, as MiMo's does (``mimo_mtp``); what
differs is data: vLLM's class, the model types, the MTP layer's names.

- vLLM: ``ErnieMTP`` (``model_executor/models/ernie_mtp.py``, architecture ``ErnieMTPModel``;
  vLLM rewrites an ``ernie4_5_moe`` config to it), run with ``speculative_config={"method":
  "mtp", "model": <target>}``. Its forward drafts from one MTP layer only (it asserts
  ``spec_step_idx == 0``), which vLLM's single-layer MTP speculator never exceeds.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head: ERNIE's smaller checkpoints do). The drafter loads a BF16 copy into its own
  ``ParallelLMHead``; vLLM's proposer replaces it by the target's at the share, so the private
  FP8 head is made there.
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="ernie45-mtp",
    title="ERNIE-4.5 MTP",
    drafters={"ErnieMTPModel": "vllm.model_executor.models.ernie_mtp:ErnieMTP"},
    model_types=("ernie4_5_moe", "ernie_mtp"),
    hf_architectures=("Ernie4_5_MoeForCausalLM", "ErnieMTPModel"),
    tiny="draft_head_fp8.tiny.ernie45_mtp",
    draft_prefixes=lambda config: ("model.mtp_",),
)
