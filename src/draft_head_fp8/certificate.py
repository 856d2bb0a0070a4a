"""Certified exact draft tokens: a proven bound on every FP8 logit's error, and a pick that uses
it to show, row by row, that the BF16 argmax was rescored (torch only, no vLLM; docs/certificate.md
derives the bound).

``rescore.rescore_top_k`` is exact whenever the BF16 argmax is among the FP8 top-k, which is
measured, not guaranteed. Here every token j gets an upper bound ``U_j >= reference_j`` from its
FP8 logit and two per-row norms made once at load (``row_error_norms``); a draft row is
*certified* when no token outside the rescored candidates can reach the best rescored logit. Its
pick is then the reference argmax with vLLM's tie rule (the lowest index among equal maxima):
equal rescored logits resolve by index, and no token outside can equal the best.

Stages per draft row: (a) the FP8 top-k, rescored; (b) if uncertified, the ``wide_k`` tokens of
highest upper bound, rescored; (c) if still uncertified, every row of the head, exactly. (a) and
(b) are static in shape and never wait for the device; (c) needs the host to know which rows, so
under a CUDA graph (``host_sync=False``) it is skipped: the row is served by (b) and counted
uncertified.

The reference is ``rescore.exact_logits``: a float32 sum of the BF16 row times the BF16
activations, rounded to the logits' dtype. The bound holds for a float32 sum in any order, so it
also bounds vLLM's own BF16 GEMM, whatever its order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from draft_head_fp8.fp8 import CHUNK_ELEMENTS, FP8_E4M3_MAX, QuantizedHead
from draft_head_fp8.rescore import exact_logits, mask_unreal, serve

KERNEL_W8A16 = "w8a16"  # BF16 activations against the FP8 weight (vLLM's CPU op)
KERNEL_SCALED_MM = "scaled_mm"  # FP8 activations, one dynamic scale per call (torch._scaled_mm)
KERNELS = (KERNEL_W8A16, KERNEL_SCALED_MM)
# BF16 activations against the exactly decoded FP8 weight, float32 sums, the scale applied once
# to the sum (fused_head.py). Its weights' deviations are within w8a16's (no misread exponent-0
# bytes), its roundings within g's spare ones (docs/certificate.md). Not in KERNELS, which
# lists vLLM's kernels (the tests emulate each one of them).
KERNEL_FUSED_W8A16 = "fused_w8a16"
KERNEL_KINDS = (*KERNELS, KERNEL_FUSED_W8A16)

# The counts tensor: rows certified by stage a, by stage b, served from every row (c), and, with
# no host sync allowed, served by stage b although uncertified.
STAGE_A, STAGE_B, STAGE_C, UNCERTIFIED = range(4)
COUNT_NAMES = ("stage_a", "stage_b", "stage_c", "uncertified")

U_BF16 = 2.0**-8  # unit roundoff, round to nearest
U_FP32 = 2.0**-24
U_E4M3 = 2.0**-4  # 3 stored mantissa bits
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10  # half the spacing of e4m3's subnormals (2^-9)
FP32_MIN_NORMAL = 2.0**-126  # what a flush to zero (FTZ/DAZ) may lose, per operation
MIN_ACTIVATION_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)  # vLLM's QuantFP8 floor
# Every coefficient is rounded up by this much: it covers the float32 roundings (a few, each at
# most 2^-24 relative) of computing the bound itself.
ROUND_UP = 1.0 + 2.0**-12


@dataclass(frozen=True)
class RowErrors:
    """Per head row i, float32, rounded up: ``error`` >= ||w_i - w^_i||_2 for every weight w^ the
    ``kernel`` may multiply by (see ``row_error_norms``) and ``norm`` >= ||w_i||_2."""

    kernel: str
    error: torch.Tensor  # [rows]
    norm: torch.Tensor  # [rows]


def _up(value: torch.Tensor) -> torch.Tensor:
    """Nonnegative float64 -> float32, never rounded down: the conversion's rounding (2^-24
    relative, none of these values is a float32 subnormal) is less than the 2^-20 added."""
    return (value * (1 + 2.0**-20)).float()


# vLLM's CPU op has no subnormal path: it reads an e4m3 byte with exponent field 0 (zero and the
# subnormals, |value| <= 0.875 * 2^-6) as +-2^-7 (1 + m / 8), at most 1.875 * 2^-7 (measured;
# tests/test_certificate.py checks it against the op where the op exists).
OP_EXPONENT_ZERO_MAX = 1.875 * 2.0**-7


@torch.no_grad()
def row_error_norms(
    weight: torch.Tensor, quantized: QuantizedHead, *, kernel: str = KERNEL_W8A16
) -> RowErrors:
    """The per-row norms the bound needs, streamed a bounded chunk at a time (never a float32
    copy of the whole head). Each weight's deviation |w - s q| + 2^-8 |s q| covers a
    dequantization to BF16 or float32; for ``KERNEL_W8A16`` a byte with exponent field 0 may
    also be read as vLLM's CPU op reads it (``OP_EXPONENT_ZERO_MAX``)."""
    _check_kernel(kernel)
    vocab, hidden = weight.shape
    error = torch.empty(vocab, dtype=torch.float32, device=weight.device)
    norm = torch.empty_like(error)
    scale = quantized.scale.float().reshape(())
    misread = OP_EXPONENT_ZERO_MAX * (1 + U_BF16) * scale
    # Per byte, from tables of all 256 e4m3 bytes: its value (float8 -> float32 element by
    # element is torch's scalar path on a CPU, half this function's time at 1024 x 262144; the
    # table holds the same conversion's results, so the values are identical) and whether its
    # exponent field is 0 (1.0 or 0.0).
    byte_values = torch.arange(256, dtype=torch.uint8, device=weight.device)
    fp8_value = byte_values.view(torch.float8_e4m3fn).float()
    exponent_zero = ((byte_values & 0x78) == 0).float()
    step = max(1, CHUNK_ELEMENTS // max(1, hidden))
    for start in range(0, vocab, step):
        w = weight[start : start + step].to(torch.float32, copy=True)  # mutated below
        q = quantized.weight[start : start + step]
        byte = q.contiguous().view(torch.uint8).reshape(-1).int()
        torch.linalg.vector_norm(w, dim=-1, out=norm[start : start + step])
        dequantized = fp8_value.index_select(0, byte).view(q.shape).mul_(scale)
        deviation = torch.sub(w, dequantized).abs_().add_(dequantized.abs_(), alpha=U_BF16)
        if kernel == KERNEL_W8A16:
            # |w - w^| <= |w| + |w^| where the op reads its own value for the byte.
            misreading = (
                w.abs_().add_(misread).mul_(exponent_zero.index_select(0, byte).view(q.shape))
            )
            torch.maximum(deviation, misreading, out=deviation)
        torch.linalg.vector_norm(deviation, dim=-1, out=error[start : start + step])
    # float32 norms of `hidden` squares: relative error <= gamma_(hidden+2); plus 2^-126 per
    # weight for one flushed to zero (triangle inequality over the row).
    grow = 1 + (hidden + 4) * 2.0**-23
    flushed = FP32_MIN_NORMAL * math.sqrt(hidden)
    return RowErrors(
        kernel,
        _up(error.double() * grow * ROUND_UP + flushed),
        _up(norm.double() * grow),
    )


def _check_kernel(kernel: str) -> None:
    if kernel not in KERNEL_KINDS:
        raise ValueError(f"kernel must be one of {KERNEL_KINDS}, got {kernel!r}")


@dataclass(frozen=True)
class LogitBound:
    """|FP8 logit_j - reference_j| <= c0 |f_j| + a * rows[0, j] + e * rows[1, j] + tau, for every
    token j of a draft row with activations x: ``a`` >= ||x||_2, ``e`` >= ||x^ - x||_2 (the
    activations the kernel multiplies by, minus x), ``c0`` = 2 u16 / (1 - u16) for the two BF16
    roundings, ``tau`` for underflow. Built by ``logit_bound``; ``scale`` < 1 or ``rounding``
    False weaken it (for tests that show the certificate can fail; neither is a proof)."""

    kernel: str
    hidden: int
    rows: torch.Tensor  # [2, partition] float32
    c0: float
    tau: float
    scale: float = 1.0
    rounding: bool = True

    def terms(self, x: torch.Tensor) -> torch.Tensor:
        """``[tokens, 2]`` float32, rounded up: (a, e) per draft row of ``x`` ``[tokens, hidden]``
        (the rows of one head call: the activation scale is the call's)."""
        xd = x.double()
        a = torch.linalg.vector_norm(xd, dim=-1)
        daz = 2.0 * FP32_MIN_NORMAL * math.sqrt(self.hidden) if self.rounding else 0.0
        if self.kernel == KERNEL_SCALED_MM:
            # vLLM's QuantFP8: scale = max|x| / 448 over the call, x / scale rounded to e4m3.
            amax = xd.abs().amax() if xd.numel() else xd.new_zeros(())
            s = torch.clamp(amax / FP8_E4M3_MAX, min=MIN_ACTIVATION_SCALE) * (1 + 2.0**-20)
            sub = E4M3_SUBNORMAL_HALF_STEP * math.sqrt(self.hidden)
            e = (U_E4M3 + 2.0**-20) * a + sub * s + daz
        else:
            e = torch.full_like(a, daz)
        return _up(torch.stack([a, e], -1) * (self.scale * ROUND_UP))

    @property
    def rounding_slope(self) -> float:
        """c0, rounded up: what the certificate takes off the FP8 logit's slope."""
        return self.c0 * self.scale * ROUND_UP

    def extra(self, top: torch.Tensor) -> torch.Tensor:
        """2 c0 max(f_top, 0) + tau per draft row, float32 rounded up, ``top`` the row's largest
        FP8 logit. For every f <= f_top, f + c0 |f| <= (1 - c0) f + 2 c0 max(f_top, 0): the
        certificate scales the logits by 1 - c0 inside its one GEMM and adds this per row,
        instead of a pass over every |f_j|."""
        positive = top.double().clamp(min=0)
        return _up(positive * (2 * self.rounding_slope) + self.tau * self.scale * ROUND_UP)


def logit_bound(
    errors: RowErrors, *, hidden: int, kernel: str, scale: float = 1.0, rounding: bool = True
) -> LogitBound:
    """The bound for a head of width ``hidden`` served by ``kernel`` (docs/certificate.md):

        B_j = c0 |f_j| + (1 + u16) [ (1 + g) (a + e) E_j + (e + g (2a + e)) W_j ] + tau

    with g = gamma_{hidden+2} = (hidden + 2) u32 / (1 - (hidden + 2) u32), E, W from
    ``row_error_norms``. ``rounding=False`` drops c0, g, tau and the flush-to-zero terms."""
    _check_kernel(kernel)
    if errors.kernel != kernel:
        raise ValueError(f"row errors were made for {errors.kernel!r}, not {kernel!r}")
    n = hidden + 2
    g = n * U_FP32 / (1 - n * U_FP32) if rounding else 0.0
    u = U_BF16 if rounding else 0.0
    e, w = errors.error.double(), errors.norm.double()
    per_a = (1 + u) * ((1 + g) * e + 2 * g * w)
    per_e = (1 + u) * (1 + g) * (e + w)
    rows = _up(torch.stack([per_a, per_e]) * ROUND_UP)
    c0 = 2 * U_BF16 / (1 - U_BF16) if rounding else 0.0
    tau = (8 * hidden + 16) * FP32_MIN_NORMAL if rounding else 0.0
    return LogitBound(kernel, hidden, rows, c0, tau, scale, rounding)


@torch.no_grad()
def logit_error_bound(
    logits: torch.Tensor, hidden: torch.Tensor, bound: LogitBound
) -> torch.Tensor:
    """B_j for every token of every draft row, ``[tokens, partition]`` float32 rounded up: the
    most any FP8 logit of this call can differ from its reference (probabilistic drafting's
    error bound; the certificate uses a cheaper form of it)."""
    flat = logits.reshape(-1, logits.shape[-1]).double()
    terms = bound.terms(hidden.reshape(-1, hidden.shape[-1])).double()
    total = terms @ bound.rows.double() + bound.tau * bound.scale
    return _up((total + flat.abs() * (bound.c0 * bound.scale)) * (1 + 2.0**-40))


class Certified(NamedTuple):
    logits: torch.Tensor  # as rescore_top_k returns them
    counts: torch.Tensor  # [4] int64 on the logits' device: this call's rows by COUNT_NAMES


class _Stage(NamedTuple):
    candidates: torch.Tensor  # [tokens, m]
    exact: torch.Tensor  # [tokens, m], -inf where invalid
    invalid: torch.Tensor  # [tokens, m]
    certified: torch.Tensor  # [tokens] bool


def _certified(upper: torch.Tensor, extra: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """Every token left in ``upper`` (rescored ones are -inf) strictly below ``best``. A bound
    that lands exactly on ``best`` counts as reaching it, whatever its index: never wrong (such a
    row goes on to the next stage), and it spares an index reduction per stage (one ``max`` with
    indices costs 15x an ``amax`` here) for a case the positive slack of the bound makes
    vanishingly rare. NaN never passes."""
    reach = upper.amax(-1) + extra
    reach = torch.nextafter(reach, torch.full_like(reach, math.inf))  # the sum, rounded up
    return reach < best


def joined(before: _Stage | None, candidates, exact, invalid, upper, extra) -> _Stage:
    """A stage's rescored candidates joined to the stages' before it, and the rows they certify
    (``upper``: -inf already on every rescored token)."""
    if before is not None:
        candidates = torch.cat([before.candidates, candidates], -1)
        exact = torch.cat([before.exact, exact], -1)
        invalid = torch.cat([before.invalid, invalid], -1)
    best = exact.amax(-1).float()
    return _Stage(candidates, exact, invalid, _certified(upper, extra, best))


def _stage(rows, x, upper, extra, blocked, candidates, before: _Stage | None) -> _Stage:
    exact = exact_logits(rows, candidates, x)
    invalid = blocked[candidates]
    exact = exact.masked_fill(invalid, float("-inf"))
    upper.scatter_(-1, candidates, float("-inf"))
    return joined(before, candidates, exact, invalid, upper, extra)


def every_row(rows, x, blocked, dtype) -> torch.Tensor:
    """Stage c: the whole head, exactly (``exact_logits``'s arithmetic), for a few draft rows
    ``x``; ``blocked`` ``[partition]`` tokens are -inf."""
    out = torch.empty(x.shape[0], rows.shape[0], dtype=dtype, device=x.device)
    step = max(1, CHUNK_ELEMENTS // max(1, rows.shape[1]))
    xf = x.float()
    for start in range(0, rows.shape[0], step):
        chunk = rows[start : start + step].float()
        for t in range(x.shape[0]):
            out[t, start : start + step] = (chunk * xf[t]).sum(-1).to(dtype)
    return out.masked_fill_(blocked, float("-inf"))


@torch.no_grad()
def certified_pick(
    logits: torch.Tensor,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    *,
    k: int,
    wide_k: int,
    valid_rows: int,
    bound: LogitBound,
    suppressed: torch.Tensor | None = None,
    host_sync: bool = True,
    totals: torch.Tensor | None = None,
) -> Certified:
    """``rescore_top_k``'s contract, proven per draft row: vLLM's argmax over the returned
    logits is the reference argmax (lowest index among ties) on every certified row, and on every
    row when ``host_sync`` (stage c serves the rest). ``host_sync=False`` (CUDA graph capture)
    never reads the device: uncertified rows are served by stage b. ``totals``: a ``[4]`` int64
    tensor to add this call's counts to, on the device, for the caller to read when it likes."""
    flat = logits.reshape(-1, logits.shape[-1])
    x = hidden.reshape(-1, hidden.shape[-1])
    partition = flat.shape[-1]
    mask_unreal(flat, valid_rows, suppressed)
    blocked = torch.zeros(partition, dtype=torch.bool, device=flat.device)
    blocked[valid_rows:] = True
    if suppressed is not None and suppressed.numel():
        blocked[suppressed] = True
    top = flat.topk(min(k, partition), dim=-1)
    candidates = top.indices
    extra = bound.extra(top.values[:, 0] if partition else top.values.new_zeros(0))
    # U_j minus the row's extra; -inf stays -inf on blocked tokens (bound.rows is finite).
    upper = flat.float().addmm_(bound.terms(x), bound.rows, beta=1 - bound.rounding_slope)
    a = _stage(rows, x, upper, extra, blocked, candidates, None)
    wide = min(wide_k, partition)
    if (host_sync and bool(a.certified.all())) or wide == 0:
        served, b_certified = a, torch.zeros_like(a.certified)
    else:
        widest = upper.topk(wide, dim=-1).indices  # stage a's candidates are -inf in upper
        served = _stage(rows, x, upper, extra, blocked, widest, a)
        b_certified = served.certified & ~a.certified
    serve(flat, served.candidates, served.exact, served.invalid)
    rest = ~(a.certified | b_certified)
    if host_sync and bool(rest.any()):
        left = rest.nonzero().squeeze(-1)
        flat[left] = every_row(rows, x[left], blocked, flat.dtype)
    none = torch.zeros_like(rest.sum())
    # With no host sync, stage c never ran: the rest were served by stage b, uncertified.
    last = [rest.sum(), none] if host_sync else [none, rest.sum()]
    counts = torch.stack([a.certified.sum(), b_certified.sum(), *last])
    if totals is not None:
        totals.add_(counts)
    return Certified(flat.view(logits.shape), counts)


def count_record(totals: Any) -> dict:
    """The counts tensor as a dict by ``COUNT_NAMES`` (reads the device: call it off the hot
    path)."""
    return {name: int(value) for name, value in zip(COUNT_NAMES, totals.tolist())}
