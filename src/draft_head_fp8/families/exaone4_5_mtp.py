"""EXAONE 4.5 MTP drafters: vLLM's ``Exaone4_5_MTP`` (``model_executor/models/exaone4_5_mtp.py``)
subclasses K-EXAONE's ``ExaoneMoeMTP`` (``exaone_moe_mtp``): the MTP layer ships inside the
target's checkpoint (``mtp.layers.0.*`` and the glue ``mtp.{fc,norm,pre_fc_norm_hidden,
pre_fc_norm_embedding}``), an EXAONE 4 decoder layer here, and the draft reads the target's head
through ``lm_head``; what differs is data: vLLM's class, the model types, and a target that is a
vision-language model (``Exaone4_5_ForConditionalGeneration``, its text model's dimensions under
``text_config``).

- vLLM rewrites an ``exaone4_5`` config to it, run with ``speculative_config={"method": "mtp",
  "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there.
- The engine tests run text only (``language_model_only``: vLLM builds no vision tower), so
  what is proven is the head's share, which the tower never touches.
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="exaone45-mtp",
    title="EXAONE 4.5 MTP",
    drafters={"Exaone4_5_MTP": "vllm.model_executor.models.exaone4_5_mtp:Exaone4_5_MTP"},
    model_types=("exaone4_5", "exaone4_5_mtp"),
    hf_architectures=("Exaone4_5_ForConditionalGeneration", "Exaone4_5_MTP"),
    tiny="draft_head_fp8.tiny.exaone4_5_mtp",
    draft_prefixes=lambda config: ("mtp.",),
    # Text only: the tower is not built (nor its processor run) on this CPU engine.
    cpu_engine_options={"language_model_only": True},
)
