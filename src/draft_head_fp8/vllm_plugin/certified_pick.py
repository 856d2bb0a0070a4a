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
from draft_head_fp8.top_k_rows import top_k_rows
from draft_head_fp8.vllm_plugin import batch_paths


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


def top_k(
    method: Any, logits: torch.Tensor, x: torch.Tensor, top: int, *,
    terms: torch.Tensor | None = None, set_only: bool = False,
) -> torch.Tensor:  # fmt: skip
    """Exact top-K rows for a drafter that reads the head's ``top`` best (``top_k_rows``); a row
    handed whole is vLLM's own BF16 logits of this call (``stock_logits``), where there is such a
    head to run."""
    stock = stock_logits(method, x)
    return top_k_rows(
        method, logits, x, top, terms=terms, wide_k=WIDE_RESCORE_TOPK, set_only=set_only,
        whole=stock,
    )  # fmt: skip


def stock_logits(method: Any, x: torch.Tensor) -> Any:
    """A callable for vLLM's own BF16 logits of the whole call ``x``: the op and the shape the
    head runs with the flag off, so a row taken from it is bit for bit the row ``torch.topk``
    sees there (the float32 sums of ``every_row`` round differently now and then: measured, 2
    of 126 DFlash2 rows, outside their top-K). The BF16 path where it serves; else the target's
    head, already prepared by vLLM, for a head read at the share; None for a head of the drafter's
    own that keeps no BF16 path (the whole rows are then ``every_row``'s)."""
    if method.bf16 is not None:
        return lambda: method.bf16(x)
    if method.bf16_layer is not None:
        return lambda: batch_paths.BF16Head(method.rescore_rows, method.bf16_layer)(x)
    return None


def record(method: Any) -> dict:
    """The certificate's facts and its counts so far (reads the device: off the hot path)."""
    if not method.certify or method.pick_counts is None:
        return {"on": False, "counts": None}
    return {"on": True, **method.bound_facts,
            "counts": certificate.count_record(method.pick_counts)}  # fmt: skip
