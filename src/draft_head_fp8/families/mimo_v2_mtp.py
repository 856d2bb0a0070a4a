"""MiMo-V2 (MiMo-V2-Flash, MiMo-V2-Pro) MTP drafters: the MTP layers ship inside the target's
checkpoint (``model.mtp.layers.{i}.*``), and the draft reads the target's head through
``lm_head``, as MiMo's does (``mimo_mtp``); what differs is data: vLLM's class, the model types,
the MTP layers' names.

- vLLM: ``MiMoV2MTP`` (``model_executor/models/mimo_v2_mtp.py``, architecture
  ``MiMoV2MTPModel``; vLLM rewrites a ``MiMoV2FlashForCausalLM`` or ``MiMoV2ForCausalLM`` config
  to it), run with ``speculative_config={"method": "mtp", "model": <target>}``. vLLM drafts from
  the first MTP layer only, whatever the checkpoint counts (it sets
  ``num_nextn_predict_layers`` to 1 itself), so only a config that counts none is refused.
- The head's bytes: the target's ``lm_head.weight``. vLLM's MiMo-V2 target never ties its head
  to its embedding (MiMo-V2 checkpoints do not), so no tied target is built. The drafter loads a
  BF16 copy into its own ``ParallelLMHead``; vLLM's proposer replaces it by the target's at the
  share, so the private FP8 head is made there.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import top_value
from draft_head_fp8.families.target_head import mtp_family, without_mtp_layers


def counts_no_mtp_layer(config: Any) -> str | None:
    """Refused only where the config counts its MTP layers and counts none: vLLM drafts from
    ``model.mtp.layers.0`` whether or not the config counts them."""
    if top_value(config, "num_nextn_predict_layers") is None:
        return None
    return without_mtp_layers(config)


FAMILY = mtp_family(
    name="mimo-v2-mtp",
    title="MiMo-V2 MTP",
    drafters={"MiMoV2MTPModel": "vllm.model_executor.models.mimo_v2_mtp:MiMoV2MTP"},
    model_types=("mimo_v2_flash", "mimo_v2", "mimo_v2_mtp"),
    hf_architectures=("MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "MiMoV2MTPModel"),
    tiny="draft_head_fp8.tiny.mimo_v2_mtp",
    refusal=counts_no_mtp_layer,
    draft_prefixes=lambda config: ("model.mtp.",),
)
