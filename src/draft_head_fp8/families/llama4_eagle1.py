"""Llama 4 EAGLE-1 drafters: vLLM's ``EagleLlama4ForCausalLM`` (``model_executor/models/
llama4_eagle.py``): ``fc`` (the embedding beside the target's hidden state, joined), Llama 4
decoder layers (dense: vLLM asserts no MoE and no YOCO in a draft) and ``norm``, and an
``lm_head`` over ``draft_vocab_size`` rows that vLLM replaces by the target's at load
(``has_own_lm_head`` False where the checkpoint has none), read as Llama EAGLE-1's is
(``llama_eagle1.eagle1_family``; this family differs from that one only in data).

- vLLM builds it for a draft config naming ``Llama4ForCausalLM`` under
  ``speculative_config={"method": "eagle"}``, or naming ``EagleLlama4ForCausalLM``; its
  ``compute_logits`` is Llama's (``logits_processor(lm_head, h)``).
- Runs on vLLM 0.34's engine with a tiny text-only Llama 4 target (``tiny/llama4_eagle1.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle1 import eagle1_family

FAMILY = eagle1_family(
    name="llama4-eagle1",
    title="Llama 4 EAGLE-1",
    vllm_class="vllm.model_executor.models.llama4_eagle:EagleLlama4ForCausalLM",
    architectures=("EagleLlama4ForCausalLM",),
    bases=("Llama4ForCausalLM",),
    model_types=("llama4_text", "llama4"),
    tiny="draft_head_fp8.tiny.llama4_eagle1",
)
