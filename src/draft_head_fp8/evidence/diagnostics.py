"""The diagnostics record archived beside each receipt: what the receipt does not carry.

Where the FP8 bytes came from (the SHA-256 of the BF16 rows quantized and of the checkpoint
tensor), how the per-tensor scale fits the head's rows, the kernel chosen and the one vLLM would
have chosen, timings, what the exact draft-token pick rescores from (``exact_pick``), and the
validation verdict, and the certified pick's facts and counts. Built here only; JSON Schemas
``schemas/diagnostics-v5.schema.json`` (the only one: an archive's older diagnostics are verified
by their bytes' hashes, never by a schema) and ``schemas/ranks-v1.schema.json`` for the cross-rank
record of a tensor-parallel boot.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.evidence import DIAGNOSTICS_V5
from draft_head_fp8.settings import BF16_FROM_ENV

RANKS_V1 = "draft-head-fp8-ranks/v1"


def head_record(
    *,
    source: Any,
    rows_hashed: int,
    source_sha256: str,
    checkpoint: dict | None,
    quantized: Any,
    kernel: str,
    vllm_default_kernel: str | None,
    seconds: dict[str, float],
    weight_layout: str = "plain",
    kernel_warning: str | None = None,
    amax_local: float | None = None,
    batch_paths: dict | None = None,
) -> dict:
    """The head's facts at load. ``source``: the BF16 tensor quantized; ``quantized``: the
    ``fp8.QuantizedHead`` made from it; ``checkpoint``: the checkpoint tensor's hash facts."""
    return {
        "source_dtype": str(source.dtype),
        "source_shape": [int(d) for d in source.shape],
        "source_rows_hashed": rows_hashed,
        "source_sha256": source_sha256,
        # Where the hashed tensor lives: the exact pick's rows must be this very storage.
        "source_data_ptr": int(source.data_ptr()),
        "checkpoint": checkpoint,
        "provenance_verified": checkpoint is not None,
        "amax": quantized.amax,
        "scale": float(quantized.scale.reshape(-1)[0]),
        "row_amax_max": quantized.row_amax_max,
        "row_amax_median": quantized.row_amax_median,
        "row_amax_ratio": quantized.row_amax_ratio,
        "kernel": kernel,
        # What vLLM would pick for a plain linear of this shape; differs where that kernel
        # repacks the weight out of the layout the receipt proves (e.g. AMX on CPU).
        "vllm_default_kernel": vllm_default_kernel,
        "seconds": {name: round(value, 6) for name, value in seconds.items()},
        "weight_layout": weight_layout,
        # Why this head is slower than it could be, as said at start-up (None: it is not).
        "kernel_warning": kernel_warning,
        # This shard's own amax; "amax" is the whole head's, which sets the one scale.
        "amax_local": quantized.amax if amax_local is None else amax_local,
        # Which path serves which batch size (FP8 + pick, or the BF16 rows), and why.
        "batch_paths": batch_paths,
    }


def record(
    *,
    phase: str,
    rank: int,
    family: str,
    target_class: str,
    head: dict,
    exact_pick: dict,
    failure: str | None,
    runner: dict | None,
    certificate: dict | None = None,
) -> dict:
    return {
        "schema": DIAGNOSTICS_V5,
        "phase": phase,
        "rank": rank,
        "family": family,
        "target_class": target_class,
        "head": head,
        "exact_pick": exact_pick,
        "validation": {"passed": failure is None, "reason": failure},
        # Which of vLLM's model runners served this boot (runners.describe).
        "runner": runner,
        # The certified pick: on or off, its bound's facts, the rows each stage decided so far.
        "certificate": certificate or {"on": False, "counts": None},
    }


def ranks_record(*, tp_size: int, summaries: list[dict], problems: list[str]) -> dict:
    """What the ranks of one tensor-parallel boot told each other, and the verdict."""
    return {
        "schema": RANKS_V1,
        "tp_size": tp_size,
        "ranks": sorted(summaries, key=lambda s: s["rank"]),
        "problems": problems,
        "passed": not problems,
    }


def _which(threshold: int | None) -> str:
    if threshold is None:
        return "the FP8 head + exact pick at every batch"
    if threshold <= 1:
        return "the BF16 rows at every batch"
    return f"the FP8 head + exact pick for 1-{threshold - 1} rows, the BF16 rows from {threshold}"


def describe_paths(record: dict) -> str:
    """One line for the start-up log and the demo: which path serves which batch sizes, and
    what was measured at load."""
    served = _which(record.get("bf16_from"))
    if record.get("why"):
        return f"{served} ({record['why']})"
    setting = record.get("setting")
    told = "" if setting == "auto" else f"{BF16_FROM_ENV}={setting}; "
    measured = record.get("measured")
    if not measured:
        return f"{served} ({told.rstrip('; ') or 'nothing measured'})"
    sizes = ", ".join(f"{m['rows']}: {m['fp8_ms']:.2f} vs {m['bf16_ms']:.2f}" for m in measured)
    default = (
        ""
        if setting == "auto"
        else (f"; the default (auto) would serve {_which(record.get('measured_bf16_from'))}")
    )
    return (
        f"{served} ({told}measured at load, rows: FP8 + pick vs BF16 ms per call: {sizes}{default})"
    )
