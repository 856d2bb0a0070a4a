"""GLM-4.5 / GLM-4.5-Air MTP drafters: laid out as DeepSeek's (``deepseek_v3_mtp``): the MTP layer
ships inside the target's checkpoint (``model.layers.{num_hidden_layers}.*``), and the draft
reads the target's head through ``lm_head`` and the MTP layer's ``shared_head.head``.

- vLLM: ``Glm4MoeMTP`` (``model_executor/models/glm4_moe_mtp.py``, architecture
  ``Glm4MoeMTPModel``; vLLM rewrites a ``Glm4MoeForCausalLM`` config to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there and given to every reference.
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
    name="glm45-mtp",
    title="GLM-4.5 MTP",
    drafters={"Glm4MoeMTPModel": "vllm.model_executor.models.glm4_moe_mtp:Glm4MoeMTP"},
    speculative_method="mtp",
    config_from=TARGET_HEAD.folder,
    model_types=("glm4_moe", "glm4_moe_mtp"),
    hf_architectures=("Glm4MoeForCausalLM", "Glm4MoeMTPModel"),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.glm45_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_layers,
    draft_prefixes=layers_after_the_target,
)
