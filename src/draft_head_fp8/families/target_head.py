"""What the families whose drafter reads the target's head have in common (MTP and EAGLE-1
drafters): where the head's bytes come from, the policy's inputs, the MTP layers' place in the
target's checkpoint, and ``mtp_family``: the record of an MTP drafter that ships inside its
target's checkpoint, whose families differ only in data (vLLM's classes, model types, where the
MTP layers sit), as the rows of vLLM's registry do. Not a family (no ``FAMILY``): the pieces
their records are made of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from draft_head_fp8.families.family import AT_SHARE, TARGET, Family, HeadSource, top_value

# The target's head, in the target's folder (its embedding where the target ties its head),
# handed to the drafter only at vLLM's share (``_maybe_share_lm_head``).
TARGET_HEAD = HeadSource(
    folder=TARGET,
    tensor="lm_head.weight",
    when=AT_SHARE,
    tied_tensor="model.embed_tokens.weight",
)


def policy_inputs(config: Any) -> dict[str, Any]:
    return {
        "ordered_embeddings": False,
        # The head is the target's: whether the target ties it decides only which checkpoint
        # tensor its bytes are hashed against (TARGET_HEAD.tied_tensor).
        "tie_word_embeddings": bool(top_value(config, "tie_word_embeddings", False)),
        "shared_target_head": True,
        # A drafter with a vocabulary of its own (EAGLE-3) would be a second head, not this one.
        "draft_vocab_size": top_value(config, "draft_vocab_size"),
        "vocab_size": top_value(config, "vocab_size"),
    }


def own_head_refusal(config: Any, drafter: str) -> str | None:
    """The refusal of a block drafter's config that says it keeps a head of its own (vLLM's
    ``has_own_lm_head``): a family reading the target's head serves none."""
    if not top_value(config, "has_own_lm_head"):
        return None
    return (
        f"a {drafter} draft whose config says has_own_lm_head keeps a head of its own, which "
        "vLLM never shares with the target's: this family serves the target's head, shared; "
        "serve it with the flag unset"
    )


def without_mtp_layers(config: Any) -> str | None:
    """The refusal of an MTP family's checkpoint that has no MTP layers to draft with."""
    if not top_value(config, "num_nextn_predict_layers", 0):
        return "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    return None


def layers_after_the_target(config: Any) -> tuple[str, ...]:
    """DeepSeek-style MTP layers: ``model.layers.{num_hidden_layers + i}.``, after the target's."""
    first = int(top_value(config, "num_hidden_layers", 0))
    count = int(top_value(config, "num_nextn_predict_layers", 0))
    return tuple(f"model.layers.{i}." for i in range(first, first + count))


def mtp_family(
    *,
    name: str,
    title: str,
    drafters: Mapping[str, str],
    model_types: tuple[str, ...],
    hf_architectures: tuple[str, ...],
    tiny: str,
    refusal: Callable[[Any], str | None] = without_mtp_layers,
    draft_prefixes: Callable[[Any], tuple[str, ...]] = layers_after_the_target,
    cpu_engine_options: Mapping[str, Any] | None = None,
    head: HeadSource = TARGET_HEAD,
) -> Family:
    """The record of an MTP drafter that ships inside its target's checkpoint and reads the
    target's head: ``check`` reads the target's config, the head's bytes are the target's
    (``TARGET_HEAD``, or ``head`` where the target's checkpoint names its embedding otherwise),
    handed over at vLLM's share, seen as ``lm_head`` registered on the drafter (and,
    DeepSeek-style, each MTP layer's ``shared_head.head``, given the same head).
    By default its MTP layers are counted in ``num_nextn_predict_layers`` and sit after the
    target's (``model.layers.{num_hidden_layers + i}.``)."""
    return Family(
        name=name,
        title=title,
        drafters=dict(drafters),
        speculative_method="mtp",
        config_from=TARGET_HEAD.folder,
        model_types=model_types,
        hf_architectures=hf_architectures,
        head=head,
        share="lm_head",
        tiny=tiny,
        policy_inputs=policy_inputs,
        refusal=refusal,
        cpu_engine_options=dict(cpu_engine_options or {}),
        draft_prefixes=draft_prefixes,
    )
