"""The check across ranks, before a tensor-parallel engine serves: every rank's own receipt
passed, the ranks' row ranges tile the padded vocabulary exactly, and they agree on what they
serve (one per-tensor scale, one top-k). Pure: works on the small summaries the ranks exchange.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.shards import tiles


def rank_summary(
    *,
    rank: int,
    tp_size: int,
    failure: str | None,
    receipt: dict,
    scale: float | None,
    top_k: int,
) -> dict:
    """What one rank tells the others: its verdict and the facts they must agree on."""
    return {
        "rank": rank,
        "tp_size": tp_size,
        "passed": failure is None,
        "reason": failure,
        "vocab_range": receipt.get("head_vocab_range"),
        "padded_vocab": receipt.get("head_vocab_padded_size"),
        "scale": scale,
        "rescore_top_k": top_k,
    }


def cross_rank_problems(summaries: list[dict[str, Any]], tp_size: int) -> list[str]:
    """Every reason these ranks must not serve together; [] when they may."""
    problems = [
        f"rank {s.get('rank')} failed: {s.get('reason')}" for s in summaries if not s.get("passed")
    ]
    ranks = sorted(s.get("rank") for s in summaries)
    if ranks != list(range(tp_size)):
        problems.append(f"ranks {ranks} reported, expected 0..{tp_size - 1}")
    sizes = {s.get("tp_size") for s in summaries}
    if sizes != {tp_size}:
        problems.append(f"ranks report TP sizes {sorted(sizes, key=str)}, expected {tp_size}")
    padded = {s.get("padded_vocab") for s in summaries}
    ranges = [s.get("vocab_range") for s in summaries]
    well_formed = all(isinstance(r, list) and len(r) == 2 for r in ranges)
    if len(padded) != 1 or not well_formed or not tiles([tuple(r) for r in ranges], *padded):
        problems.append(
            f"row ranges {ranges} do not tile the padded vocabulary ({sorted(padded, key=str)})"
        )
    scales = {s.get("scale") for s in summaries}
    if len(scales) != 1:
        problems.append(f"ranks hold different per-tensor scales: {sorted(scales, key=str)}")
    top_k = {s.get("rescore_top_k") for s in summaries}
    if len(top_k) != 1:
        problems.append(f"ranks rescore different top-k: {sorted(top_k, key=str)}")
    return problems
