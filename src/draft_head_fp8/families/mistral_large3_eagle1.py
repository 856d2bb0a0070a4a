"""Mistral Large 3 EAGLE-1 drafters: vLLM's ``EagleMistralLarge3ForCausalLM``
(``model_executor/models/mistral_large_3_eagle.py``): ``model.fc`` (the embedding beside the
target's hidden state, joined), DeepSeek-V2 decoder layers (MLA) and ``model.norm``, no head:
its ``load_weights`` reports ``lm_head.weight`` loaded without reading one, and vLLM shares the
target's ``lm_head`` (``has_own_lm_head`` False); its ``compute_logits`` is DeepSeek-V3's
(``logits_processor(lm_head, h)``). So the head is read as Llama EAGLE-1's is
(``llama_eagle1.eagle1_family``); this family differs from Mistral's EAGLE-1 only in data.

- vLLM builds it for a draft config whose first architecture is ``MistralLarge3ForCausalLM``
  (``SpeculativeConfig.hf_config_override`` names it ``EagleMistralLarge3ForCausalLM``; vLLM's
  Mistral-format parser gives a Mistral Large 3 ``params.json`` that architecture and the model
  type ``deepseek_v3``), under ``speculative_config={"method": "eagle"}``. The weights as
  Hugging Face names them (``model.layers.0.*``, ``model.fc.weight``, ``model.norm.weight``);
  Mistral's own format (``layers.0.attention.wq_a``, ``eagle_linear``) reaches the same modules
  through the class's ``hf_to_vllm_mapper``.
- Its target: ``MistralLarge3ForCausalLM`` (DeepSeek-V3's class under Mistral's names), whose
  head is ``lm_head`` (``output`` in Mistral's format).
- Recognised by its config naming ``MistralLarge3ForCausalLM`` and its folder's ``model.fc``
  (a DeepSeek-V3 EAGLE draft keeps ``fc`` at the top: ``deepseek-eagle1``'s).
- Runs on vLLM 0.34's engine with a tiny Hugging Face-format target and draft
  (``tiny/mistral_large3_eagle1.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle1 import eagle1_family

FAMILY = eagle1_family(
    name="mistral-large3-eagle1",
    title="Mistral Large 3 EAGLE-1",
    vllm_class=("vllm.model_executor.models.mistral_large_3_eagle:EagleMistralLarge3ForCausalLM"),
    architectures=("EagleMistralLarge3ForCausalLM",),
    bases=("MistralLarge3ForCausalLM",),
    model_types=("deepseek_v3",),
    fusion_tensor="model.fc.weight",
    tiny="draft_head_fp8.tiny.mistral_large3_eagle1",
)
