"""How an FP8 head's weight can be laid out in memory, and what each layout means for its shape
and its scale: the vocabulary the kernels (torch, vLLM), the receipts and their checks (pure)
share. Pure: no torch, no vLLM.
"""

from __future__ import annotations

from typing import Any

# The FP8 [hidden, vocab] matrix itself (the .t() of a contiguous [vocab, hidden] tensor), one
# [1] scale: what the layout-keeping kernels (CUTLASS, FlashInfer, torch._scaled_mm) read.
LAYOUT_PLAIN = "plain"
# vLLM's CPU packer (torch.ops._C.convert_weight_packed): VNNI tiles, [vocab, hidden] as stored,
# read by fp8_scaled_mm_cpu with a block scale of one entry per K block.
LAYOUT_PACKED = "convert_weight_packed"
LAYOUTS = (LAYOUT_PLAIN, LAYOUT_PACKED)
# The CPU W8A16 kernel's K block: its block scale has ceil(hidden / K_BLOCK) entries.
K_BLOCK = 128


def logical_shape(physical: Any, layout: str) -> list[int] | None:
    """The ``[hidden, vocab]`` matrix a stored weight stands for, in a known layout."""
    if not isinstance(physical, list) or len(physical) != 2 or layout not in LAYOUTS:
        return None
    return list(physical) if layout == LAYOUT_PLAIN else [physical[1], physical[0]]


def kernel_scale_shape(layout: str, hidden: int) -> list[int]:
    """The shape of the scale the kernel reads: one ``[1]`` scalar, or one entry per K block."""
    return [1] if layout == LAYOUT_PLAIN else [1, k_blocks(hidden)]


def k_blocks(hidden: int) -> int:
    return -(-hidden // K_BLOCK)
