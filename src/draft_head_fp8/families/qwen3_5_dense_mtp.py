"""Dense Qwen3.5 MTP drafters (Qwen3.5-27B and its dense siblings): the MTP layer ships inside the
target's checkpoint (``mtp.*``), and the draft reads the target's head, as the Qwen3.5-MoE
drafter's does (``qwen3_5_mtp``); what differs is data: vLLM's class and the model types.

- vLLM: ``Qwen3_5MTP`` (``model_executor/models/qwen3_5_mtp.py``, the class ``Qwen3_5MoeMTP``
  subclasses; vLLM rewrites a ``qwen3_5`` or ``qwen3_5_text`` config to it, its MTP layer count
  read from ``mtp_num_hidden_layers``), run with ``speculative_config={"method": "mtp",
  "model": <target>}``. vLLM 0.34 builds it from ``vllm.models.qwen3_5``: this class off CUDA,
  an NVIDIA one on CUDA, which the flag refuses (``policy.unexpected_drafter_class``).
- The head's bytes: the target's ``lm_head.weight``; the drafter builds a head of its own, which
  vLLM's proposer replaces by the target's at the share, so the private FP8 head is made there.
- As for Qwen3.5-MoE: no prefix caching on a CPU (the gated-delta-net layers' mamba "align"
  cache mode calls a Triton kernel), and vLLM's Qwen3.5 model files import torchvision (the
  engine test's stand-in: ``tests/shims/torchvision``).
"""

from __future__ import annotations

from draft_head_fp8.families.qwen3_5_mtp import without_mtp_hidden_layers
from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="qwen35-dense-mtp",
    title="Qwen3.5 (dense) MTP",
    drafters={"Qwen3_5MTP": "vllm.model_executor.models.qwen3_5_mtp:Qwen3_5MTP"},
    # Not "qwen3_5_mtp": vLLM gives the MoE drafter that model type too.
    model_types=("qwen3_5", "qwen3_5_text"),
    hf_architectures=("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MTP"),
    tiny="draft_head_fp8.tiny.qwen3_5_dense_mtp",
    refusal=without_mtp_hidden_layers,
    draft_prefixes=lambda config: ("mtp.",),
    cpu_engine_options={"enable_prefix_caching": False},
)
