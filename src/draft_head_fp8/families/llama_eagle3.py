"""Llama EAGLE-3 drafters: a separate draft folder holding one decoder layer whose attention reads
``2 x hidden`` (the token embedding beside the fused hidden state), ``fc`` (the fusion of three of
the target's layers' hidden states, ``3 x hidden -> hidden``), and either a head of its own or
none. What every EAGLE-3 family shares is here too (``eagle3_family``): the other EAGLE-3 classes
of vLLM (Qwen3's, DeepSeek's) read their head exactly so, and differ from this one only in data.

- vLLM: ``Eagle3LlamaForCausalLM`` (``model_executor/models/llama_eagle3.py``), run with
  ``speculative_config={"method": "eagle3", "model": <draft>}``; vLLM's ``EAGLEConfig`` names a
  draft's ``LlamaForCausalLM`` architecture ``Eagle3LlamaForCausalLM``, and published drafts name
  themselves ``LlamaForCausalLMEagle3``. vLLM's registry builds three more architectures as this
  very class (``SAME_CLASS``: the drafts published for MiniMax-M2, Qwen2.5-VL and Qwen3-VL
  targets), so they are this family's too; the engine test runs one of them on vLLM 0.34
  (``Eagle3MiniMaxM2ForCausalLM``: the shipped trained Llama pair's draft config renamed; its own
  head, so the share the run proves is ``embed_tokens``). P-EAGLE's parallel drafting (vLLM 0.32's
  ``PEagleDraftModel``, also this class) drafts differently and stays refused
  (``vllm_plugin/unserved.py``).
- vLLM 0.34's local argmax reduction (``use_local_argmax_reduction``: greedy drafts through
  ``get_top_tokens``, each rank's argmax of its own shard's logits, then the best of the ranks)
  asks the same head method for each rank's logits, so the exact pick holds for it: proven at
  TP 2 on the engine (``tests/test_eagle3.py``).
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

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import AT_LOAD, DRAFT, Family, HeadSource, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs

OWN_HEAD = HeadSource(folder=DRAFT, tensor="lm_head.weight", when=AT_LOAD)
FUSION_TENSOR = "fc.weight"
# Architectures vLLM's registry maps to Eagle3LlamaForCausalLM besides its own two names.
SAME_CLASS = (
    "Eagle3MiniMaxM2ForCausalLM",
    "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM",
)
ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", *SAME_CLASS)


def head_for(draft_folder: Path) -> HeadSource:
    """vLLM's own test (``process_eagle_weight``): a draft whose checkpoint holds ``lm_head``
    serves its own head; one without reads the target's."""
    from draft_head_fp8.checkpoint import has_tensor

    return OWN_HEAD if has_tensor(draft_folder, OWN_HEAD.tensor) else TARGET_HEAD


def fuses_aux_hidden_states(config: Any, folder: Path) -> bool:
    """Whether the folder's ``fc`` joins several of the target's hidden states (three by default;
    ``eagle_aux_hidden_state_layer_ids`` where the config names them), not EAGLE-1's one beside
    the embedding."""
    from draft_head_fp8.checkpoint import CheckpointError, find_tensor

    try:
        shape = find_tensor(folder, FUSION_TENSOR)[1].get("shape")
    except CheckpointError:
        return False
    hidden = config_value(config, "hidden_size")
    target = config_value(config, "target_hidden_size") or hidden
    layers = config_value(config, "eagle_aux_hidden_state_layer_ids") or (0, 1, 2)
    return hidden is None or shape == [hidden, len(layers) * target]


def recognise_eagle3(
    names: tuple[str, ...], bases: tuple[str, ...], config: Any, folder: Path
) -> bool:
    """An EAGLE-3 draft of one family: its config names one of ``names``, or one of ``bases`` (the
    target's architecture, which vLLM's ``EAGLEConfig`` prefixes with ``Eagle3``) while its
    folder holds an EAGLE-3 ``fc``."""
    architectures = config_value(config, "architectures") or []
    if any(a in names for a in architectures):
        return True
    return any(a in bases for a in architectures) and fuses_aux_hidden_states(config, folder)


def eagle3_family(
    *,
    name: str,
    title: str,
    vllm_class: str,
    architectures: Iterable[str],
    model_types: tuple[str, ...],
    tiny: str,
    bases: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
) -> Family:
    """An EAGLE-3 family: ``architectures`` (vLLM's names, all built as ``vllm_class``) read their
    head as Llama's does (its own, or the target's: ``head_for``). ``names`` are what draft
    configs call themselves beyond vLLM's names; ``bases`` what a draft config may name instead
    (the target's architecture) where its ``fc`` shows it is an EAGLE-3 draft."""
    drafters = {architecture: vllm_class for architecture in architectures}
    named = (*names, *drafters)
    return Family(
        name=name,
        title=title,
        drafters=drafters,
        speculative_method="eagle3",
        config_from=DRAFT,
        model_types=model_types,
        hf_architectures=(*named, *bases),
        # Any target vLLM can take auxiliary hidden states from (Llama, Qwen3, gpt-oss, ...): the
        # published drafts of many targets are these drafters.
        # Without a folder to look at, the head published drafts carry: their own.
        head=OWN_HEAD,
        head_for=head_for,
        share="embed_tokens",
        tiny=tiny,
        policy_inputs=policy_inputs,
        recognise=partial(recognise_eagle3, named, bases),
    )


FAMILY = eagle3_family(
    name="llama-eagle3",
    title="Llama EAGLE-3",
    vllm_class="vllm.model_executor.models.llama_eagle3:Eagle3LlamaForCausalLM",
    architectures=("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", *SAME_CLASS),
    model_types=("llama",),
    tiny="draft_head_fp8.tiny.llama_eagle3",
)
