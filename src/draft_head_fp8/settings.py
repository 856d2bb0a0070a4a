"""The package's environment: every variable it reads is named here, and read and checked here
only. A bad value refuses start-up with one line that says what is allowed: the user asked for
something, and a silent default would be a lie. Pure: no torch, no vLLM."""

from __future__ import annotations

import os
from collections.abc import Mapping

from draft_head_fp8.errors import HeadFp8EligibilityError

# The experiment flag (docs/contract.md, "Public names"); ``policy.env_enabled`` reads it.
EXPERIMENT_ENV = "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"
# Where boots are archived; unset: the per-user state folder (``archive.default_root``).
ARCHIVE_ENV = "DRAFT_HEAD_FP8_ARCHIVE"

RESCORE_ENV = "DRAFT_HEAD_FP8_RESCORE_TOPK"
# Candidates rescored exactly from the BF16 rows. Chosen from measurements (docs/benchmarks.md,
# bench/fidelity.py): the FP8 top-4 missed the BF16 pick on 1 of 2577 draft rows of the trained
# pair, the top-8 on none, and on none of the synthetic 262144-row heads up to a row-amax ratio of
# 1.1e4; the four extra rows cost 8 KiB per token, next to nothing beside the scan.
DEFAULT_RESCORE_TOPK = 8
MAX_RESCORE_TOPK = 64  # beyond this the "pick" is a second head, not a rescoring

CERTIFY_ENV = "DRAFT_HEAD_FP8_CERTIFY"
CERTIFY = {
    "on": "every draft pick certified against a proven bound on each FP8 logit's error, or "
    "served from the BF16 rows (docs/certificate.md)",
    "off": "the top-k rescored without a certificate: exact whenever the BF16 token is among "
    "the FP8 top-k (measured, not guaranteed)",
}
# Stage b of the certified pick: the tokens of highest upper bound rescored when the top-k do not
# certify a row; a static size, so that the pick keeps its shapes under a CUDA graph.
WIDE_RESCORE_TOPK = 64

CPU_KERNEL_ENV = "DRAFT_HEAD_FP8_CPU_KERNEL"
CPU_KERNELS = {
    "auto": "vLLM's W8A16 op (fp8_scaled_mm_cpu) where vLLM ships it; refused where it does not",
    "scaled_mm": "torch._scaled_mm, the layout-keeping path: served even where it is slow",
}
# What serves the slow path anyway where ``auto`` refuses it.
SLOW_CPU_OVERRIDE = f"{CPU_KERNEL_ENV}=scaled_mm"

HEAD_KERNEL_ENV = "DRAFT_HEAD_FP8_KERNEL"
HEAD_KERNELS = {
    "auto": "the fused Triton kernel (FP8 scan + certified pick) on CUDA; vLLM's W8A16 op on a "
    "CPU that has it",
    "triton": "the fused Triton kernel wherever Triton runs (on a CPU only under "
    "TRITON_INTERPRET=1: for tests, not for speed)",
    "vllm": "vLLM's own FP8 kernels everywhere, the pick in torch after them",
}

BF16_FROM_ENV = "DRAFT_HEAD_FP8_BF16_FROM"
BF16_FROM_AUTO, BF16_FROM_NEVER = "auto", "never"


# vLLM's own: a source build for CPU sets it (and vLLM's platform detection reads it at run time);
# ``check`` reads it to tell a CPU build of distribution ``vllm`` from a CUDA one.
VLLM_TARGET_DEVICE_ENV = "VLLM_TARGET_DEVICE"


def _value(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or not value.strip() else value.strip()


def flag_as_set(environ: Mapping[str, str] | None = None) -> str | None:
    """The experiment flag's value exactly as set (None: unset), for records of a run; what it
    means is ``policy.env_enabled``'s to say."""
    return (os.environ if environ is None else environ).get(EXPERIMENT_ENV)


def vllm_target_device(environ: Mapping[str, str] | None = None) -> str | None:
    """vLLM's ``VLLM_TARGET_DEVICE`` as set (None: unset)."""
    return _value(VLLM_TARGET_DEVICE_ENV, environ)


def archive_root(environ: Mapping[str, str] | None = None) -> str | None:
    """The archive folder the user named, or None for the default."""
    return _value(ARCHIVE_ENV, environ)


def exact_pick_top_k(environ: Mapping[str, str] | None = None) -> int:
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


def certify(environ: Mapping[str, str] | None = None) -> bool:
    """Whether each draft pick is certified (``on``, the default) or only rescored (``off``)."""
    raw = _value(CERTIFY_ENV, environ)
    if raw is None:
        return True
    if raw.lower() not in CERTIFY:
        raise HeadFp8EligibilityError(
            f"{CERTIFY_ENV}={raw!r} is not one of {', '.join(CERTIFY)} (on: {CERTIFY['on']})"
        )
    return raw.lower() == "on"


def _one_of(name: str, choices: Mapping[str, str], environ: Mapping[str, str] | None) -> str:
    """``name``'s value among ``choices`` (whose ``auto`` is the default), lower-cased."""
    raw = _value(name, environ)
    if raw is None:
        return "auto"
    if raw.lower() not in choices:
        raise HeadFp8EligibilityError(
            f"{name}={raw!r} is not one of {', '.join(choices)} (auto: {choices['auto']})"
        )
    return raw.lower()


def cpu_kernel(environ: Mapping[str, str] | None = None) -> str:
    """Which FP8 kernel family a CPU head may use: ``auto`` or ``scaled_mm``."""
    return _one_of(CPU_KERNEL_ENV, CPU_KERNELS, environ)


def head_kernel(environ: Mapping[str, str] | None = None) -> str:
    """Which kernel serves the FP8 head and its pick: ``auto``, ``triton`` or ``vllm``."""
    return _one_of(HEAD_KERNEL_ENV, HEAD_KERNELS, environ)


def bf16_from(environ: Mapping[str, str] | None = None) -> str | int:
    """From how many rows per call the BF16 rows serve the draft head instead of the FP8 scan:
    ``auto`` (measured at load on a CPU), ``never``, or a whole number of rows."""
    raw = _value(BF16_FROM_ENV, environ)
    if raw is None:
        return BF16_FROM_AUTO
    if raw.lower() in (BF16_FROM_AUTO, BF16_FROM_NEVER):
        return raw.lower()
    try:
        rows = int(raw, 10)
    except ValueError:
        rows = 0
    if rows < 1:
        raise HeadFp8EligibilityError(
            f"{BF16_FROM_ENV}={raw!r} is not auto, never or a whole number of rows from 1 "
            "(auto: measured at load on a CPU; never: the FP8 head at every batch size)"
        )
    return rows
