"""DeepSeek-V3 MTP drafters: the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers}.*``), and the draft reads the target's head through two
references: ``lm_head`` and the MTP layer's ``shared_head.head``.

- vLLM: ``DeepSeekMTP`` (``model_executor/models/deepseek_mtp.py``, architecture
  ``DeepSeekMTPModel``; vLLM rewrites a ``deepseek_v3`` config to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head). The checkpoint's MTP layer carries a copy (``shared_head.head``), which the drafter
  loads and vLLM's proposer then deletes, assigning the target's head to every reference
  (``_maybe_share_lm_head``); so the private FP8 head is made at the share, from this rank's rows
  of the target's head, and handed to each reference.
- The share the plugin sees: ``lm_head`` registered on the drafter, and ``head`` on each MTP
  layer's ``shared_head``: each is handed the same private FP8 head.
"""

from __future__ import annotations

from draft_head_fp8.families.family import Family
from draft_head_fp8.families.target_head import (
    TARGET_HEAD,
    layers_after_the_target,
    policy_inputs,
    without_mtp_layers,
)

FAMILY = Family(
    name="deepseek-v3-mtp",
    title="DeepSeek-V3 MTP",
    drafters={"DeepSeekMTPModel": "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP"},
    speculative_method="mtp",
    config_from=TARGET_HEAD.folder,
    model_types=("deepseek_v3", "deepseek_mtp"),
    hf_architectures=("DeepseekV3ForCausalLM", "DeepSeekMTPModel"),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.deepseek_v3_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_layers,
    draft_prefixes=layers_after_the_target,
)
