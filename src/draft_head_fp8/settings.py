"""The package's own settings, read from the environment and checked in one place. A bad value
refuses start-up with one line that says what is allowed: the user asked for something, and a
silent default would be a lie. Pure: no torch, no vLLM."""

from __future__ import annotations

import os
from collections.abc import Mapping

from draft_head_fp8.policy import HeadFp8EligibilityError

RESCORE_ENV = "DRAFT_HEAD_FP8_RESCORE_TOPK"
# Candidates rescored exactly from the BF16 rows. Chosen from measurements (docs/benchmarks.md,
# bench/fidelity.py): the FP8 top-4 missed the BF16 pick on 1 of 2577 draft rows of the trained
# pair, the top-8 on none, and on none of the synthetic 262144-row heads up to a row-amax ratio of
# 1.1e4; the four extra rows cost 8 KiB per token, next to nothing beside the scan.
DEFAULT_RESCORE_TOPK = 8
MAX_RESCORE_TOPK = 64  # beyond this the "pick" is a second head, not a rescoring

CPU_KERNEL_ENV = "DRAFT_HEAD_FP8_CPU_KERNEL"
CPU_KERNELS = {
    "auto": "vLLM's W8A16 op (fp8_scaled_mm_cpu) where vLLM ships it, else torch._scaled_mm",
    "scaled_mm": "torch._scaled_mm, the layout-keeping path (slow on CPU; for comparison)",
}


def _value(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or not value.strip() else value.strip()


def rescore_top_k(environ: Mapping[str, str] | None = None) -> int:
    """k of the exact top-k pick; 0 means plain FP8 logits."""
    raw = _value(RESCORE_ENV, environ)
    if raw is None:
        return DEFAULT_RESCORE_TOPK
    try:
        k = int(raw, 10)
    except ValueError:
        k = -1
    if not 0 <= k <= MAX_RESCORE_TOPK:
        raise HeadFp8EligibilityError(
            f"{RESCORE_ENV}={raw!r} is not a whole number from 0 to {MAX_RESCORE_TOPK} "
            f"(0 = plain FP8 logits; unset = {DEFAULT_RESCORE_TOPK})"
        )
    return k


def cpu_kernel(environ: Mapping[str, str] | None = None) -> str:
    """Which FP8 kernel family a CPU head may use: ``auto`` or ``scaled_mm``."""
    raw = _value(CPU_KERNEL_ENV, environ)
    if raw is None:
        return "auto"
    if raw.lower() not in CPU_KERNELS:
        raise HeadFp8EligibilityError(
            f"{CPU_KERNEL_ENV}={raw!r} is not one of {', '.join(CPU_KERNELS)} "
            f"(auto: {CPU_KERNELS['auto']})"
        )
    return raw.lower()
