"""GLM-OCR MTP drafters: vLLM's ``GlmOcrMTP`` (``model_executor/models/glm_ocr_mtp.py``) is built
on GLM-4.7-Flash's MTP predictor (``glm4_moe_lite_mtp``): the MTP layer ships inside the target's
checkpoint (``model.language_model.layers.{num_hidden_layers}.*``, a GLM-4 decoder layer beside
DeepSeek-style glue), and the draft reads the target's head through the MTP layer's
``shared_head.head`` (the checkpoint's ``lm_head.weight`` is loaded there); what differs is data:
vLLM's class, the model types, and a target that is a vision-language model
(``GlmOcrForConditionalGeneration``, its text model's dimensions under ``text_config``).

- vLLM rewrites a ``GlmOcrForConditionalGeneration`` config to it, run with
  ``speculative_config={"method": "mtp", "model": <target>}``; vLLM's proposer assigns the
  target's head to ``shared_head.head`` at the share.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there and given to every reference.
- The engine tests run text only (``language_model_only``: vLLM builds no vision tower).
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import config_value, top_value
from draft_head_fp8.families.target_head import mtp_family


def without_mtp_layers(config: Any) -> str | None:
    """vLLM reads GLM-OCR's MTP layer count twice: at the config's top (its config rewrite, the
    number of draft steps) and in its text config (the layers it builds); none in either is
    no MTP drafter."""
    counts = (
        top_value(config, "num_nextn_predict_layers", 0),
        config_value(config, "num_nextn_predict_layers", 0),
    )
    if not all(counts):
        return "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    return None


def layers_after_the_text_model(config: Any) -> tuple[str, ...]:
    first = int(config_value(config, "num_hidden_layers", 0))
    count = int(config_value(config, "num_nextn_predict_layers", 0))
    return tuple(f"model.language_model.layers.{i}." for i in range(first, first + count))


FAMILY = mtp_family(
    name="glm-ocr-mtp",
    title="GLM-OCR MTP",
    drafters={"GlmOcrMTPModel": "vllm.model_executor.models.glm_ocr_mtp:GlmOcrMTP"},
    model_types=("glm_ocr", "glm_ocr_mtp"),
    hf_architectures=("GlmOcrForConditionalGeneration", "GlmOcrMTPModel"),
    tiny="draft_head_fp8.tiny.glm_ocr_mtp",
    refusal=without_mtp_layers,
    draft_prefixes=layers_after_the_text_model,
    # Text only: the tower is not built (nor its processor run) on this CPU engine.
    cpu_engine_options={"language_model_only": True},
)
