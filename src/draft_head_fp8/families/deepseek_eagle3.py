"""DeepSeek-V2/V3 EAGLE-3 drafters: vLLM's own EAGLE-3 class for DeepSeek
(``Eagle3DeepseekV2ForCausalLM``, ``model_executor/models/deepseek_eagle3.py``, also registered as
``Eagle3DeepseekV3ForCausalLM``): one decoder layer with DeepSeek's MLA attention reading
``2 x hidden`` and a dense MLP (never MoE), ``fc`` over three of the target's hidden states, and a
head of its own or none: the head is read exactly as Llama EAGLE-3's is
(``llama_eagle3.eagle3_family``; this family differs from that one only in data).

- vLLM builds it for a draft config naming either architecture, or naming
  ``DeepseekV2ForCausalLM`` under ``speculative_config={"method": "eagle3"}``. The draft's config
  is a ``deepseek_v2`` one: vLLM rewrites every ``deepseek_v3`` draft config to its MTP drafter
  (``SpeculativeConfig.hf_config_override``), so a DeepSeek-V3 target's EAGLE-3 draft says
  ``deepseek_v2``. Its ``compute_logits`` is Llama EAGLE-3's, and its ``get_top_tokens`` (vLLM's
  local argmax reduction, ``LocalArgmaxMixin``) asks ``logits_processor.get_top_tokens`` of the
  same head, then maps ``d2t``.
- Its own head (``lm_head.weight``, ``draft_vocab_size`` rows; vLLM builds it without a quant
  config): made FP8 at load, the share the plugin sees is ``embed_tokens``. None: the target's
  head, shared, a private FP8 copy made at the share. Both run on vLLM 0.34's engine with a tiny
  DeepSeek-V3 target (``tiny/deepseek_eagle3.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle3 import eagle3_family

FAMILY = eagle3_family(
    name="deepseek-eagle3",
    title="DeepSeek-V2/V3 EAGLE-3",
    vllm_class="vllm.model_executor.models.deepseek_eagle3:Eagle3DeepseekV2ForCausalLM",
    architectures=("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"),
    bases=("DeepseekV2ForCausalLM",),
    model_types=("deepseek_v2",),
    tiny="draft_head_fp8.tiny.deepseek_eagle3",
)
