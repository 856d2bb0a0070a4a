"""DeepSeek-V3 EAGLE-1 drafters: vLLM's ``EagleDeepseekV3ForCausalLM`` (``model_executor/models/
deepseek_eagle.py``, architecture ``EagleDeepSeekMTPModel``): an MTP-style layer as a separate
EAGLE draft: ``enorm``/``hnorm``, ``fc`` (the normed embedding beside the normed target hidden
state), DeepSeek decoder layers (MLA, MoE) and ``norm``, and an ``lm_head`` that vLLM replaces by
the target's at load (``has_own_lm_head`` False where the checkpoint has none), read as Llama
EAGLE-1's is (``llama_eagle1.eagle1_family``; this family differs from that one only in data).

- vLLM builds it for a ``deepseek_v3`` draft config under ``speculative_config={"method":
  "eagle"}``: vLLM rewrites every such config to ``DeepSeekMTPModel`` and ``EAGLEConfig``
  prefixes ``Eagle``. Its ``compute_logits`` is ``logits_processor(lm_head, h)``.
- Recognised by its folder's ``fc`` (an MTP checkpoint keeps ``eh_proj`` inside the target's
  folder: that is ``deepseek-v3-mtp``'s).
- Runs on vLLM 0.34's engine with a tiny DeepSeek-V3 target (``tiny/deepseek_eagle1.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle1 import eagle1_family

FAMILY = eagle1_family(
    name="deepseek-eagle1",
    title="DeepSeek-V3 EAGLE-1",
    vllm_class="vllm.model_executor.models.deepseek_eagle:EagleDeepseekV3ForCausalLM",
    architectures=("EagleDeepSeekMTPModel",),
    bases=("DeepseekV3ForCausalLM", "DeepSeekMTPModel"),
    model_types=("deepseek_v3",),
    tiny="draft_head_fp8.tiny.deepseek_eagle1",
)
