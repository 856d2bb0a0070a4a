"""The probe's check of a drafter that drafts a whole block per step from one head call (DFlash):
vLLM's speculator hands the head every request's every draft position at once, rows ordered
(request, position), and drafts each row's argmax. Beside the agreement of every row with the
BF16 head's pick (``worker_probe.watch_draft_agreement``), this counts it per position of the
block, so that a position the pick never reached, or got wrong, shows by itself; and, flag on,
how often the FP8 head's plain argmax (vLLM's FP8 kernel alone on the same hidden states, the
certified pick left out) would have drafted another token than the BF16 head (``fp8_argmax_
differs``: what the certified pick corrected; flag off the head is BF16 and it stays 0).
"""

from __future__ import annotations

from typing import Any


def plain_fp8_argmax(head: Any, hidden: Any, vocab: int) -> Any:
    """The argmax of the head's plain FP8 logits on ``hidden`` over the ``vocab`` real tokens
    (its kernel alone, the whole head), or None where the head is not this package's FP8 head
    at tensor parallel 1. The fused kernel (``pick``) makes its pick inside its scan: it serves
    no plain logits to compare."""
    method = getattr(head, "quant_method", None)
    kernel = getattr(method, "fp8_linear", None)
    if kernel is None or hasattr(kernel, "pick") or getattr(head, "tp_size", 1) != 1:
        return None
    return kernel.apply_weights(head, hidden, None)[..., :vocab].argmax(-1).cpu()


def count_block(stats: dict, steps: int, same: Any, expected: Any, plain: Any) -> None:
    """Add one head call's rows to ``stats``: ``same`` (each row's pick is the BF16 head's) per
    position of the block, ``expected`` (the BF16 head's picks) against ``plain`` (the plain FP8
    argmax, None flag off). A call whose rows are not whole blocks is counted as ``ragged``."""
    positions = stats.setdefault("positions", [{"steps": 0, "agree": 0} for _ in range(steps)])
    stats.setdefault("fp8_argmax_differs", 0)
    if plain is not None:
        stats["fp8_argmax_differs"] += int((plain != expected).sum())
    if same.numel() % steps:
        stats["ragged"] = stats.get("ragged", 0) + 1
        return
    blocks = same.view(-1, steps)
    for position, counted in enumerate(positions):
        counted["steps"] += int(blocks.shape[0])
        counted["agree"] += int(blocks[:, position].sum())
