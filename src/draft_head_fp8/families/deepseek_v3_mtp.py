"""DeepSeek-V3 MTP drafters: the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers}.*``), and the draft reads the target's head through two
references: ``lm_head`` and the MTP layer's ``shared_head.head``.

- vLLM: ``DeepSeekMTP`` (``model_executor/models/deepseek_mtp.py``, architecture
  ``DeepSeekMTPModel``; vLLM rewrites a ``deepseek_v3`` config to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head). The checkpoint's MTP layer carries a copy (``shared_head.head``), which the drafter
  loads and vLLM's proposer then deletes, assigning the target's head to every reference
  (``_maybe_share_lm_head``); so the private FP8 head is made at the share, from this rank's rows
  of the target's head, and handed to each reference.
- The share the plugin sees: ``lm_head`` registered on the drafter, and ``head`` on each MTP
  layer's ``shared_head``: each is handed the same private FP8 head.
- DeepSeek-V3.2 (``deepseek_v32``, ``DeepseekV32ForCausalLM``) and the checkpoints that reuse its
  sparse attention (GLM-5's ``glm_moe_dsa``): vLLM rewrites their configs to the architecture
  ``DeepseekV32MTPModel``, whose class off CUDA and ROCm is this same ``DeepSeekMTP``
  (``vllm/models/deepseek_v32/__init__.py``); the checkpoint differs only in data (the MTP
  layer's indexer weights and ``index_*`` fields, which the head never reads), the head and its
  share are DeepSeek-V3's, so the DeepSeek-V3 engine run covers it. vLLM itself runs no V3.2
  target on a CPU ("Sparse Attention is not supported on CPU", ``platforms/cpu.py``). On CUDA and
  ROCm vLLM builds another class for it (``vllm.models.deepseek_v32.{nvidia,amd}.mtp``), which
  the flag refuses at construction (``policy.unexpected_drafter_class``) until someone reads it.
"""

from __future__ import annotations

from draft_head_fp8.families.target_head import mtp_family

DEEPSEEK_MTP = "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP"

FAMILY = mtp_family(
    name="deepseek-v3-mtp",
    title="DeepSeek-V3 MTP",
    drafters={"DeepSeekMTPModel": DEEPSEEK_MTP, "DeepseekV32MTPModel": DEEPSEEK_MTP},
    model_types=("deepseek_v3", "deepseek_mtp", "deepseek_v32", "glm_moe_dsa"),
    hf_architectures=(
        "DeepseekV3ForCausalLM",
        "DeepSeekMTPModel",
        "DeepseekV32ForCausalLM",
        "DeepseekV32MTPModel",
        "GlmMoeDsaForCausalLM",
    ),
    tiny="draft_head_fp8.tiny.deepseek_v3_mtp",
)
