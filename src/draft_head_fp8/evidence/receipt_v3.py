"""Receipt v3: for the heads that v2 cannot describe truthfully (docs/contract.md, "Receipt v3").

v2 proves one layout: a plain ``[hidden, vocab]`` FP8 weight with one ``[1]`` scale, at TP 1.
vLLM's CPU W8A16 kernel repacks the weight into VNNI tiles (stored ``[vocab, hidden]``, with a
``[1, k-blocks]`` block scale), and at tensor parallel N each rank holds a vocab shard. A v3
receipt keeps every v2 key with its meaning, for a shard this rank's partition, and adds what the
proof needs: the layout and the logical shape read through it, the per-tensor scale as stored and
whether the scale the kernel reads equals it everywhere, and this rank's rows.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.evidence import RECEIPT_V3
from draft_head_fp8.evidence.receipt import capture
from draft_head_fp8.evidence.snapshot import call_or_none, tensor_snapshot
from draft_head_fp8.families.family import Modules
from draft_head_fp8.layouts import LAYOUT_PLAIN, logical_shape

V3_KEYS = (
    "head_weight_layout",
    "head_weight_logical_shape",
    "head_weight_scale_stored",
    "head_kernel_scale_equals_stored",
    "tp_rank",
    "tp_size",
    "head_vocab_padded_size",
    "head_vocab_range",
    "head_real_vocab_range",
)


def _equals_everywhere(kernel_scale: Any, stored: Any) -> bool | None:
    if kernel_scale is None or stored is None:
        return None
    return call_or_none(
        lambda: (
            kernel_scale.numel() >= 1
            and stored.numel() == 1
            and bool((kernel_scale == stored.reshape(())).all())
        )
    )


def _range(start: Any, end: Any) -> list[int] | None:
    return call_or_none(lambda: [int(start), int(end)])


def extend_to_v3(receipt: dict, head: Any, *, layout: str, stored_scale: Any) -> dict:
    """A v2 receipt of ``head`` made v3: its layout, its stored scale, this rank's rows."""
    hidden = receipt["draft_config_hidden_size"] or receipt["head_partition_hidden_size"]
    rows = receipt["head_partition_vocab_size"]
    indices = getattr(head, "shard_indices", None)
    start = getattr(indices, "padded_org_vocab_start_index", None)
    weight = receipt["head_weight"] or {}
    return {
        **receipt,
        "schema": RECEIPT_V3,
        # For a shard, v2's [hidden, vocab] is this rank's [hidden, partition rows].
        "head_expected_weight_shape": None if hidden is None or rows is None else [hidden, rows],
        "head_weight_layout": layout,
        "head_weight_logical_shape": logical_shape(weight.get("shape"), layout),
        "head_weight_scale_stored": tensor_snapshot(
            stored_scale, finite=True, positive_scalar=True
        ),
        "head_kernel_scale_equals_stored": _equals_everywhere(
            getattr(head, "weight_scale", None), stored_scale
        ),
        "tp_rank": call_or_none(lambda: int(head.tp_rank)) or 0,
        "tp_size": call_or_none(lambda: int(head.tp_size)) or 1,
        "head_vocab_padded_size": call_or_none(lambda: int(head.num_embeddings_padded)),
        "head_vocab_range": None if start is None or rows is None else _range(start, start + rows),
        "head_real_vocab_range": _range(
            getattr(indices, "org_vocab_start_index", None),
            getattr(indices, "org_vocab_end_index", None),
        ),
    }


def receipt_for_head(modules: Modules, *, decision: Any, phase: str, v3: bool = False) -> dict:
    """The receipt that says the truth about the draft head as it serves: v2 wherever v2 can (a
    plain ``[hidden, vocab]`` weight, unsharded, with no vocab padding), else v3; v3 always where
    ``v3`` (a drafter with several heads: only v3 and later list them)."""
    head = modules.head
    method = getattr(head, "quant_method", None)
    layout = getattr(method, "weight_layout", LAYOUT_PLAIN)
    receipt = capture(modules, head=head, decision=decision, phase=phase)
    tp_size = call_or_none(lambda: int(head.tp_size)) or 1
    padded = receipt["head_partition_vocab_size"] != receipt["draft_config_vocab_size"]
    if layout == LAYOUT_PLAIN and tp_size == 1 and not padded and not v3:
        return receipt
    return extend_to_v3(
        receipt, head, layout=layout, stored_scale=getattr(method, "stored_scale", None)
    )
