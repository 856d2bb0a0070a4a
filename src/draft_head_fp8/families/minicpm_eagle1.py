"""MiniCPM EAGLE-1 drafters: vLLM's ``EagleMiniCPMForCausalLM`` (``model_executor/models/
minicpm_eagle.py``): ``model.fc`` over the normed embedding (``input_norm1``, times MiniCPM's
``scale_emb``) beside the normed target hidden state (``input_norm2``), MiniCPM decoder layers
(``model.eagle_layers.*``, residuals scaled by ``scale_depth``), and an ``lm_head`` that vLLM
replaces by the target's at load (``has_own_lm_head`` False where the checkpoint has none), read
as Llama EAGLE-1's is (``llama_eagle1.eagle1_family``; this family differs from that one only in
data).

- Its width scale (``hidden_size / dim_model_base``) divides the hidden states in ``forward``,
  before ``compute_logits``, which is ``logits_processor(lm_head, h)`` and nothing else: the head
  (and so the exact pick) sees the scaled hidden states, and nothing changes its logits after.
- vLLM builds it for a draft config naming ``MiniCPMForCausalLM`` under
  ``speculative_config={"method": "eagle"}``, or naming ``EagleMiniCPMForCausalLM``. MiniCPM's
  config class is remote code; a ``llama`` config with MiniCPM's fields (``scale_emb``,
  ``scale_depth``, ``dim_model_base``) is what vLLM reads.
- Runs on vLLM 0.34's engine with a tiny MiniCPM target (``tiny/minicpm_eagle1.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle1 import eagle1_family

FAMILY = eagle1_family(
    name="minicpm-eagle1",
    title="MiniCPM EAGLE-1",
    vllm_class="vllm.model_executor.models.minicpm_eagle:EagleMiniCPMForCausalLM",
    architectures=("EagleMiniCPMForCausalLM",),
    bases=("MiniCPMForCausalLM",),
    model_types=("llama", "minicpm"),
    fusion_tensor="model.fc.weight",
    tiny="draft_head_fp8.tiny.minicpm_eagle1",
)
