"""Intern-S2-Mobius MTP drafters: vLLM's ``InternS2MobiusMTP``
(``model_executor/models/interns2_mobius.py``) is Qwen3.5-MoE's MTP class (``qwen3_5_mtp``)
built on the drafter's own model config, so it reads its head as Qwen3.5's does: the MTP layer
ships inside the target's checkpoint (``mtp.*``), and vLLM's proposer installs the target's
``lm_head`` as the drafter's at the share; what differs is data: vLLM's class, the model type,
the architectures.

- vLLM rewrites a config of model type ``interns2_mobius`` to it (its MTP layer count read from
  ``text_config.mtp_num_hidden_layers``, its experts from ``mtp_num_experts``), run with
  ``speculative_config={"method": "mtp", "model": <target>}``. Only that model type: a
  ``qwen3_5_moe`` config naming Mobius's target is drafted by Qwen3.5's class.
- Real checkpoints load their configuration with remote code (``auto_map``; neither transformers
  nor vLLM has a class for ``interns2_mobius``): vLLM runs them with ``trust_remote_code``; the
  flag reads config.json.
- The target (``InternS2MobiusForConditionalGeneration``) is a vision-language model; the
  engine tests run it text only (``language_model_only``), its model file imports torchvision
  (through Qwen3-VL's: the tests' stand-in), and as for Qwen3.5 no prefix caching on a CPU.
"""

from __future__ import annotations

from dataclasses import replace

from draft_head_fp8.families.qwen3_5_mtp import without_mtp_hidden_layers
from draft_head_fp8.families.target_head import TARGET_HEAD, mtp_family

FAMILY = mtp_family(
    name="interns2-mobius-mtp",
    title="Intern-S2-Mobius MTP",
    drafters={"InternS2MobiusMTP": "vllm.model_executor.models.interns2_mobius:InternS2MobiusMTP"},
    model_types=("interns2_mobius",),
    hf_architectures=("InternS2MobiusForConditionalGeneration", "InternS2MobiusMTP"),
    tiny="draft_head_fp8.tiny.interns2_mobius_mtp",
    # The language model sits under model.language_model., where a tied head's bytes would be.
    head=replace(TARGET_HEAD, tied_tensor="model.language_model.embed_tokens.weight"),
    refusal=without_mtp_hidden_layers,
    draft_prefixes=lambda config: ("mtp.",),
    cpu_engine_options={"enable_prefix_caching": False, "language_model_only": True},
)
