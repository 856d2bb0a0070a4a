"""Llama EAGLE-1 drafters: a separate draft folder holding one decoder layer and ``fc`` (the
fusion of the token embedding with the target's hidden state), and no head of its own: the
draft reads the target's ``lm_head`` on every draft token. What every EAGLE-1 family shares is
here too (``eagle1_family``): vLLM's other EAGLE-1 classes (Mistral's, MiniCPM's, DeepSeek's MTP
layer as an EAGLE draft) read the target's head exactly so, and differ from this one only in data
(vLLM's class, the config's model types, where the checkpoint keeps ``fc``).

- vLLM: ``EagleLlamaForCausalLM`` (``model_executor/models/llama_eagle.py``), run with
  ``speculative_config={"method": "eagle", "model": <draft>}``; vLLM's ``EAGLEConfig`` names the
  draft's ``LlamaForCausalLM`` architecture ``EagleLlamaForCausalLM``.
- The head's bytes: the target's ``lm_head.weight`` (``model.embed_tokens.weight`` where the
  target ties its head), in the target's folder. They reach the drafter only at the share
  (``_maybe_share_lm_head`` assigns the target's ``ParallelLMHead`` to ``drafter.lm_head``), so
  the private FP8 head is made there, from this rank's rows of the target's head.
- The share the plugin sees: ``lm_head`` registered on the drafter. It hands back the private
  FP8 head; the target's head keeps serving the target, BF16, untouched.
- Recognised by its weights: a config of the family's model type (naming one of its
  architectures, if it names any) is an EAGLE-1 draft when its folder holds ``fc`` joining two
  vectors of the hidden size.
- A draft with a head of its own is outside these families: vLLM 0.32's EAGLE Llama builds no
  ``lm_head`` module to load it into, so such a checkpoint does not start with or without the
  flag; the other classes build one and keep it (``has_own_lm_head``), which the plugin does not
  serve: no share happens, so no receipt, and the drafter refuses to draft. EAGLE-3 drafts
  (``fc`` over three hidden states) are not these families'.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import DRAFT, Family, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs

FUSION_TENSOR = "fc.weight"


def fuses_one_hidden_state(fusion_tensor: str, config: Any, folder: Path) -> bool:
    """An EAGLE-1 ``fc`` joins two vectors of the hidden size (the embedding and one hidden
    state); an EAGLE-3 draft's joins three of the target's layers, and is not this family's."""
    from draft_head_fp8.checkpoint import CheckpointError, find_tensor

    try:
        shape = find_tensor(folder, fusion_tensor)[1].get("shape")
    except CheckpointError:
        return False
    hidden = config_value(config, "hidden_size")
    return hidden is None or shape == [hidden, 2 * hidden]


def recognise_eagle1(
    architectures: tuple[str, ...], fusion_tensor: str, config: Any, folder: Path
) -> bool:
    """An EAGLE-1 draft of one family: a config naming none of another family's architectures
    (a MiniCPM draft is a ``llama`` config too), whose folder holds the family's ``fc``."""
    named = config_value(config, "architectures") or []
    if named and not any(a in architectures for a in named):
        return False
    return fuses_one_hidden_state(fusion_tensor, config, folder)


def eagle1_family(
    *,
    name: str,
    title: str,
    vllm_class: str,
    architectures: tuple[str, ...],
    bases: tuple[str, ...],
    model_types: tuple[str, ...],
    tiny: str,
    fusion_tensor: str = FUSION_TENSOR,
    target_model_types: tuple[str, ...] = (),
) -> Family:
    """An EAGLE-1 family: vLLM's ``architectures`` (all built as ``vllm_class``) read the target's
    head, shared (``TARGET_HEAD``); a draft config names one of them or one of ``bases`` (the
    target's architecture, which vLLM's ``EAGLEConfig`` prefixes with ``Eagle``), and its folder
    holds ``fusion_tensor``."""
    named = (*architectures, *bases)
    return Family(
        name=name,
        title=title,
        drafters={architecture: vllm_class for architecture in architectures},
        speculative_method="eagle",
        config_from=DRAFT,
        model_types=model_types,
        hf_architectures=named,
        target_model_types=target_model_types,
        head=TARGET_HEAD,
        share="lm_head",
        tiny=tiny,
        policy_inputs=policy_inputs,
        recognise=partial(recognise_eagle1, named, fusion_tensor),
    )


FAMILY = eagle1_family(
    name="llama-eagle1",
    title="Llama EAGLE-1",
    vllm_class="vllm.model_executor.models.llama_eagle:EagleLlamaForCausalLM",
    architectures=("EagleLlamaForCausalLM",),
    bases=("LlamaForCausalLM",),
    model_types=("llama",),
    target_model_types=("llama",),
    tiny="draft_head_fp8.tiny.llama_eagle1",
)
