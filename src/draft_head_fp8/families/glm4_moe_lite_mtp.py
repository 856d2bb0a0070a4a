"""GLM-4.7-Flash MTP drafters (``glm4_moe_lite``): laid out as GLM-4.5's (``glm45_mtp``): the MTP
layer ships inside the target's checkpoint (``model.layers.{num_hidden_layers}.*``), and the
draft reads the target's head through ``lm_head`` and the MTP layer's ``shared_head.head``; what
differs is data: vLLM's class, the model types, and the target's attention (DeepSeek-style MLA),
which the head never reads.

- vLLM: ``Glm4MoeLiteMTP`` (``model_executor/models/glm4_moe_lite_mtp.py``, architecture
  ``Glm4MoeLiteMTPModel``; vLLM rewrites a ``Glm4MoeLiteForCausalLM`` config to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``. Its logits come from the MTP
  layer's ``shared_head.head``, to which vLLM's proposer assigns the target's head at the share.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there and given to every reference.
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="glm4-moe-lite-mtp",
    title="GLM-4.7-Flash MTP",
    drafters={"Glm4MoeLiteMTPModel": "vllm.model_executor.models.glm4_moe_lite_mtp:Glm4MoeLiteMTP"},
    model_types=("glm4_moe_lite", "glm4_moe_lite_mtp"),
    hf_architectures=("Glm4MoeLiteForCausalLM", "Glm4MoeLiteMTPModel"),
    tiny="draft_head_fp8.tiny.glm4_moe_lite_mtp",
)
