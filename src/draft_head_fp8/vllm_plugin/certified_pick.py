"""The head method's certified pick (docs/certificate.md): the bound made once the head's bytes
are (at load, and again after each weight update), the pick each draft-head call goes through,
and the facts and counts the diagnostics record. The arithmetic is ``certificate``'s; the head
method owns what this makes (it asks, it keeps)."""

from __future__ import annotations

import time
from typing import Any

import torch

from draft_head_fp8 import certificate
from draft_head_fp8.settings import WIDE_RESCORE_TOPK


def bound_kernel(method: Any) -> str:
    """Which kernel arithmetic the bound covers: what the kernel choice said with the kernel
    (``kernels.KernelChoice.bound``); a method made outside that choice (unit tests with a kernel
    of their own) is taken as quantizing its activations, the looser bound."""
    choice = getattr(method, "kernel", None)
    return certificate.KERNEL_SCALED_MM if choice is None else choice.bound


def make_bound(method: Any, source: torch.Tensor, quantized: Any) -> tuple[Any, dict | None]:
    """The bound of ``method``'s head made from its BF16 rows and their FP8 copy, and its facts
    for the diagnostics; (None, None) where the certificate is off. The head method keeps both."""
    if not method.certify:
        return None, None
    started = time.perf_counter()
    kernel = bound_kernel(method)
    errors = certificate.row_error_norms(source, quantized, kernel=kernel)
    bound = certificate.logit_bound(errors, hidden=int(source.shape[1]), kernel=kernel)
    return bound, {
        "kernel": kernel,
        "top_k": method.rescore_k,
        "wide_k": WIDE_RESCORE_TOPK,
        "max_row_error": float(errors.error.max()) if errors.error.numel() else 0.0,
        "seconds": round(time.perf_counter() - started, 6),
    }


def new_counts(device: torch.device) -> torch.Tensor:
    """How many draft rows each stage decided, on the device, zero: made once per boot."""
    return torch.zeros(len(certificate.COUNT_NAMES), dtype=torch.int64, device=device)


def pick(method: Any, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The certified pick over this call's FP8 logits. A CUDA graph being captured must not wait
    for the device: stage c is then left out, and its rows counted."""
    capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
    return certificate.certified_pick(
        logits, x, method.rescore_rows, k=method.rescore_k, wide_k=WIDE_RESCORE_TOPK,
        valid_rows=method.real_rows, bound=method.bound, suppressed=method.suppressed,
        host_sync=not capturing, totals=method.pick_counts,
    ).logits  # fmt: skip


def record(method: Any) -> dict:
    """The certificate's facts and its counts so far (reads the device: off the hot path)."""
    if not method.certify or method.pick_counts is None:
        return {"on": False, "counts": None}
    return {"on": True, **method.bound_facts,
            "counts": certificate.count_record(method.pick_counts)}  # fmt: skip
