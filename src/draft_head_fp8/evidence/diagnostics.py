"""The diagnostics record archived beside each receipt: what the receipt does not carry.

Where the FP8 bytes came from (the SHA-256 of the BF16 rows quantized and of the checkpoint
tensor), how the per-tensor scale fits the head's rows, the kernel chosen and the one vLLM would
have chosen, timings, and the validation verdict. Built here only; the JSON Schema is
``schemas/diagnostics-v1.schema.json``.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.evidence import DIAGNOSTICS_V1


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
) -> dict:
    """The head's facts at load. ``source``: the BF16 tensor quantized; ``quantized``: the
    ``fp8.QuantizedHead`` made from it; ``checkpoint``: the checkpoint tensor's hash facts."""
    return {
        "source_dtype": str(source.dtype),
        "source_shape": [int(d) for d in source.shape],
        "source_rows_hashed": rows_hashed,
        "source_sha256": source_sha256,
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
    }


def record(*, phase: str, rank: int, target_class: str, head: dict, failure: str | None) -> dict:
    return {
        "schema": DIAGNOSTICS_V1,
        "phase": phase,
        "rank": rank,
        "target_class": target_class,
        "head": head,
        "validation": {"passed": failure is None, "reason": failure},
    }
