"""The runtime receipt: what was observed about the draft head, the embeddings and the target head
right after the embedding share (metadata only, never weight values), and its write-once file.

Key names and meanings are the contract (docs/contract.md, "Receipt v2"); the checks that read
them are ``evidence.checks``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from draft_head_fp8.durable import create_exclusive, makedirs_durable
from draft_head_fp8.evidence import RECEIPT_V2
from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.evidence.snapshot import tensor_snapshot
from draft_head_fp8.families.family import Modules, present_or, resolve
from draft_head_fp8.policy import Eligibility


def _config_dim(config: Any, name: str) -> int | None:
    try:
        value = int(getattr(config, name, None))
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value > 0 else None


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _method_name(module: Any) -> str | None:
    method = getattr(module, "quant_method", None)
    return None if method is None else type(method).__name__


def capture(modules: Modules, *, head: Any, decision: Eligibility, phase: str) -> dict:
    """Receipt v2 of ``head`` among the resolved ``modules``: metadata only, never values."""
    drafter = modules.drafter
    draft_embed, target_embed = modules.draft_embed, modules.target_embed
    target_head = modules.target_head

    method = getattr(head, "quant_method", None)
    kernel = getattr(method, "fp8_linear", None)
    weight = getattr(head, "weight", None)
    scale = getattr(head, "weight_scale", None)
    draft_embed_weight = getattr(draft_embed, "weight", None)
    target_embed_weight = getattr(target_embed, "weight", None)

    draft_config = getattr(drafter, "config", None)
    # The language model's dimensions: a multimodal config keeps them in its text config, an
    # encoder-decoder one (Nemotron Parse's) in its decoder's.
    decoder = getattr(draft_config, "decoder", None)
    if not getattr(draft_config, "is_encoder_decoder", False):
        decoder = None
    text_config = present_or(
        getattr(draft_config, "text_config", None), present_or(decoder, draft_config)
    )
    config_hidden = _config_dim(text_config, "hidden_size")
    # The head's vocabulary: the draft's own where its config names one (EAGLE-3), else the
    # vocabulary it shares with the target.
    config_vocab = _config_dim(text_config, "draft_vocab_size") or _config_dim(
        text_config, "vocab_size"
    )
    partition_hidden = _int_or_none(getattr(head, "input_size_per_partition", None))
    partition_vocab = _int_or_none(getattr(head, "output_size_per_partition", None))
    hidden = config_hidden if config_hidden is not None else partition_hidden
    vocab = config_vocab if config_vocab is not None else partition_vocab

    return {
        "schema": RECEIPT_V2,
        "phase": phase,
        "eligible": decision.eligible,
        "eligibility_reason": decision.reason,
        "role": decision.role,
        "prefix": decision.prefix,
        "ordered_embeddings": decision.ordered_embeddings,
        "tie_word_embeddings": decision.tie_word_embeddings,
        "quant_spec": decision.quant_spec,
        "head_class": f"{type(head).__module__}.{type(head).__name__}",
        "head_method": None if method is None else type(method).__name__,
        "head_method_module": type(method).__module__,
        "head_kernel": None if kernel is None else type(kernel).__name__,
        "head_tp_size": getattr(head, "tp_size", None),
        "draft_config_hidden_size": config_hidden,
        "draft_config_vocab_size": config_vocab,
        "head_partition_hidden_size": partition_hidden,
        "head_partition_vocab_size": partition_vocab,
        # The processed FP8 weight is stored transposed, [hidden, vocab].
        "head_expected_weight_shape": None if hidden is None or vocab is None else [hidden, vocab],
        "head_weight": tensor_snapshot(weight, finite=True),
        "head_weight_scale": tensor_snapshot(scale, finite=True, positive_scalar=True),
        # No finiteness for the embeddings: that would read another 0.5-3 GiB at every start.
        "draft_embed": tensor_snapshot(draft_embed_weight),
        "target_embed": tensor_snapshot(target_embed_weight),
        "target_lm_head_weight": tensor_snapshot(getattr(target_head, "weight", None)),
        "head_weight_is_draft_embed": weight is not None
        and draft_embed is not None
        and weight is draft_embed_weight,
        "head_weight_is_target_embed": weight is not None
        and target_embed is not None
        and weight is target_embed_weight,
        "draft_embed_weight_is_target_embed": draft_embed is not None
        and target_embed is not None
        and draft_embed_weight is target_embed_weight,
        "draft_embedding_method": _method_name(draft_embed),
        "target_embedding_method": _method_name(target_embed),
        "target_lm_head_method": _method_name(target_head),
    }


def make_runtime_receipt(
    *,
    head: Any,
    draft_model: Any,
    target_model: Any,
    decision: Eligibility,
    phase: str,
    target_lm_head: Any = None,
) -> dict:
    """The contract's capture (docs/contract.md, "Receipt v2"): the modules resolved as every
    family here lays them out, the target head given or the target language model's."""
    modules = resolve(draft_model, target_model)
    if target_lm_head is not None:
        modules = replace(modules, target_head=target_lm_head)
    return capture(modules, head=head, decision=decision, phase=phase)


def write_runtime_receipt(receipt: Mapping, path: str | os.PathLike) -> None:
    """Write the receipt once: creates parents, never overwrites (``FileExistsError``), and leaves
    either no file or the whole file, fsynced with its folder, whatever happens."""
    data = document_bytes(receipt)  # serialise first: a bad receipt must not leave a file behind
    target = os.fspath(path)
    if os.path.lexists(target):
        raise FileExistsError(f"receipt already exists, not overwriting: {target}")
    makedirs_durable(os.path.dirname(os.path.abspath(target)))
    create_exclusive(target, data)
