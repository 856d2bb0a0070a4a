"""Llama EAGLE-3 drafters: a separate draft folder holding one decoder layer whose attention reads
``2 x hidden`` (the token embedding beside the fused hidden state), ``fc`` (the fusion of three of
the target's layers' hidden states, ``3 x hidden -> hidden``), and either a head of its own or
none.

- vLLM: ``Eagle3LlamaForCausalLM`` (``model_executor/models/llama_eagle3.py``), run with
  ``speculative_config={"method": "eagle3", "model": <draft>}``; vLLM's ``EAGLEConfig`` names a
  draft's ``LlamaForCausalLM`` architecture ``Eagle3LlamaForCausalLM``, and published drafts name
  themselves ``LlamaForCausalLMEagle3``. The other architectures vLLM maps to EAGLE-3 classes
  (P-EAGLE's parallel drafting, the Qwen3, DeepSeek, MiniMax and vision-language targets'
  drafts) are not built or run here, so they stay refused (``vllm_plugin/unserved.py``).
- Two heads, by checkpoint (``head_for``):
  - **its own** (``lm_head.weight`` in the draft folder, ``draft_vocab_size`` rows, mapped to
    target ids through ``d2t`` in vLLM's ``compute_logits``): loaded with the drafter, so the FP8
    copy is made at load, hashed against that tensor; the exact pick is over the draft vocabulary,
    before vLLM maps it. The share the plugin sees is ``embed_tokens`` on the drafter's model (the
    draft has none of its own; vLLM hands it the target's), as for
    an MTP assistant with a head of its own.
  - **none** (no ``lm_head`` in the checkpoint, the draft vocabulary the target's): vLLM shares the
    target's head, served as for EAGLE-1 (a private FP8 copy at the share).
- Refused: a head of its own over the target's whole vocabulary (``policy``: vLLM compares it
  byte for byte with the target's head after loading and shares the target's when equal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import AT_LOAD, DRAFT, Family, HeadSource, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs

OWN_HEAD = HeadSource(folder=DRAFT, tensor="lm_head.weight", when=AT_LOAD)
ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")


def head_for(draft_folder: Path) -> HeadSource:
    """vLLM's own test (``process_eagle_weight``): a draft whose checkpoint holds ``lm_head``
    serves its own head; one without reads the target's."""
    from draft_head_fp8.checkpoint import has_tensor

    return OWN_HEAD if has_tensor(draft_folder, OWN_HEAD.tensor) else TARGET_HEAD


def recognise(config: Any, folder: Path) -> bool:
    return any(a in ARCHITECTURES for a in config_value(config, "architectures") or [])


FAMILY = Family(
    name="llama-eagle3",
    title="Llama EAGLE-3",
    drafters={
        architecture: "vllm.model_executor.models.llama_eagle3:Eagle3LlamaForCausalLM"
        for architecture in ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3")
    },
    speculative_method="eagle3",
    config_from=DRAFT,
    model_types=("llama",),
    hf_architectures=ARCHITECTURES,
    # Any target vLLM can take auxiliary hidden states from (Llama, Qwen3, gpt-oss, ...): the
    # published drafts of many targets are this Llama-architecture draft.
    # Without a folder to look at, the head published drafts carry: their own.
    head=OWN_HEAD,
    head_for=head_for,
    share="embed_tokens",
    tiny="draft_head_fp8.tiny.llama_eagle3",
    policy_inputs=policy_inputs,
    recognise=recognise,
)
