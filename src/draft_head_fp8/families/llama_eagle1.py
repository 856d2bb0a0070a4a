"""Llama EAGLE-1 drafters: a separate draft folder holding one decoder layer and ``fc`` (the
fusion of the token embedding with the target's hidden state), and no head of its own: the
draft reads the target's ``lm_head`` on every draft token.

- vLLM: ``EagleLlamaForCausalLM`` (``model_executor/models/llama_eagle.py``), run with
  ``speculative_config={"method": "eagle", "model": <draft>}``; vLLM's ``EAGLEConfig`` names the
  draft's ``LlamaForCausalLM`` architecture ``EagleLlamaForCausalLM``.
- The head's bytes: the target's ``lm_head.weight`` (``model.embed_tokens.weight`` where the
  target ties its head), in the target's folder. They reach the drafter only at the share
  (``_maybe_share_lm_head`` assigns the target's ``ParallelLMHead`` to ``drafter.lm_head``), so
  the private FP8 head is made there, from this rank's rows of the target's head.
- The share the plugin sees: ``lm_head`` registered on the drafter. It hands back the private
  FP8 head; the target's head keeps serving the target, BF16, untouched.
- Recognised by its weights: a Llama config is an EAGLE-1 draft when its folder holds ``fc``.
- A draft with a head of its own is outside this family: vLLM 0.32's EAGLE Llama builds no
  ``lm_head`` module to load it into, so such a checkpoint does not start with or without the
  flag; EAGLE-3 drafts (``fc`` over three hidden states) are not this family's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import DRAFT, Family, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs

FUSION_TENSOR = "fc.weight"


def recognise(config: Any, folder: Path) -> bool:
    """An EAGLE-1 ``fc`` joins two vectors of the hidden size (the embedding and one hidden
    state); an EAGLE-3 draft's joins three of the target's layers, and is not this family's."""
    from draft_head_fp8.checkpoint import CheckpointError, find_tensor

    try:
        shape = find_tensor(folder, FUSION_TENSOR)[1].get("shape")
    except CheckpointError:
        return False
    hidden = config_value(config, "hidden_size")
    return hidden is None or shape == [hidden, 2 * hidden]


FAMILY = Family(
    name="llama-eagle1",
    title="Llama EAGLE-1",
    drafters={
        "EagleLlamaForCausalLM": "vllm.model_executor.models.llama_eagle:EagleLlamaForCausalLM"
    },
    speculative_method="eagle",
    config_from=DRAFT,
    model_types=("llama",),
    hf_architectures=("LlamaForCausalLM", "EagleLlamaForCausalLM"),
    target_model_types=("llama",),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.llama_eagle1",
    policy_inputs=policy_inputs,
    recognise=recognise,
)
