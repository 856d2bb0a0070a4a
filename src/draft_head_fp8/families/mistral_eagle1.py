"""Mistral EAGLE-1 drafters: vLLM's ``EagleMistralForCausalLM`` (``model_executor/models/
mistral_eagle.py``): ``model.fc`` (the embedding beside the target's hidden state, joined), one
Mistral decoder layer (with its input norm) and a final ``model.norm``, no head: vLLM shares the
target's ``lm_head`` at load (``has_own_lm_head`` False), and the head is read as Llama EAGLE-1's
is (``llama_eagle1.eagle1_family``; this family differs from that one only in data).

- vLLM builds it for a draft config naming ``MistralForCausalLM`` under
  ``speculative_config={"method": "eagle"}`` (``EAGLEConfig`` prefixes ``Eagle``), or naming
  ``EagleMistralForCausalLM``; the weights as Hugging Face names them (``model.layers.0.*``,
  ``model.fc.weight``, ``model.norm.weight``; Mistral's own format calls ``fc``
  ``eagle_linear``). Its ``compute_logits`` is Llama's (``logits_processor(lm_head, h)``).
- Runs on vLLM 0.34's engine with a tiny Mistral target (``tiny/mistral_eagle1.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle1 import eagle1_family

FAMILY = eagle1_family(
    name="mistral-eagle1",
    title="Mistral EAGLE-1",
    vllm_class="vllm.model_executor.models.mistral_eagle:EagleMistralForCausalLM",
    architectures=("EagleMistralForCausalLM",),
    bases=("MistralForCausalLM",),
    model_types=("mistral",),
    fusion_tensor="model.fc.weight",
    tiny="draft_head_fp8.tiny.mistral_eagle1",
)
