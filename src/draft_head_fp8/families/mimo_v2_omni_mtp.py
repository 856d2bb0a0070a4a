"""MiMo-V2-Omni MTP drafters: vLLM's ``MiMoV2OmniMTP`` (``model_executor/models/mimo_v2_mtp.py``,
architecture ``MiMoV2OmniMTPModel``) is MiMo-V2's ``MiMoV2MTP`` with a multimodal
``embed_input_ids`` (image and audio embeddings merged into the token embeddings before the MTP
layer): its MTP layers, its ``lm_head``, its ``compute_logits`` and its ``load_weights`` are
MiMo-V2's (``mimo_v2_mtp``), so the head is read as there; what differs is data: vLLM's class
and the target's architecture.

- vLLM rewrites a ``MiMoV2OmniForCausalLM`` config (the omni model: a vision and an audio tower
  beside MiMo-V2-Flash's language model, ``language_model.*``) to it, run with
  ``speculative_config={"method": "mtp", "model": <target>}``; vLLM drafts from the first MTP
  layer only, as for MiMo-V2.
- The head's bytes: the target's ``lm_head.weight`` (the language model's), handed over at the
  share; the private FP8 head is made there.
- The engine tests run text only (``language_model_only``: vLLM builds no tower), so what is
  proven is the head's share, which the towers never touch.
"""

from __future__ import annotations

from draft_head_fp8.families.mimo_v2_mtp import counts_no_mtp_layer
from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="mimo-v2-omni-mtp",
    title="MiMo-V2-Omni MTP",
    drafters={"MiMoV2OmniMTPModel": "vllm.model_executor.models.mimo_v2_mtp:MiMoV2OmniMTP"},
    model_types=(),
    hf_architectures=("MiMoV2OmniForCausalLM", "MiMoV2OmniMTPModel"),
    tiny="draft_head_fp8.tiny.mimo_v2_omni_mtp",
    refusal=counts_no_mtp_layer,
    draft_prefixes=lambda config: ("model.mtp.",),
    # Text only: the towers are not built (nor their processors run) on this CPU engine.
    cpu_engine_options={"language_model_only": True},
)
