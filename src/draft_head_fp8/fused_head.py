"""The certified pick with its FP8 head fused into one Triton kernel (mechanism: torch + Triton;
imported only where it is used, never by the package). docs/certificate.md, "The fused kernel".

Stage 1, one launch over blocks of vocabulary rows (every draft row in each program): the FP8
logits (BF16 activations times the exactly decoded e4m3 weight, float32 products and sums, the
per-tensor scale applied once to the sum, one round to BF16), and per summary block of
``SUMMARY_N`` rows and draft row: the largest logit, its first index, and the largest upper bound
``U_j`` of the certificate. Stage 2, torch ops of static shapes and no host read: the summary
blocks of highest upper bound are rescored exactly (``rescore.exact_logits``, the arithmetic of
``certificate.certified_pick``, so ties break identically), certified with
``certificate._certified`` and served with ``rescore.serve``; stage c as there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from draft_head_fp8.certificate import (
    KERNEL_FUSED_W8A16,
    Certified,
    LogitBound,
    _Stage,
    every_row,
    joined,
)
from draft_head_fp8.rescore import exact_logits, serve

# Launch configurations by device kind. The CUDA values are starting points for H100/H200 from
# GemLite's Triton GEMVs (BLOCK_N 128-512 head rows per program, 1-4 warps), to be tuned on a
# GPU. TILE caps the elements of one program's broadcast product [draft rows, BLOCK_N, BLOCK_K]:
# BLOCK_K shrinks as the rows of a launch grow, so a program's registers stay bounded. The
# interpreter (numpy, programs one after another) wants few, large programs.
LAUNCH = {
    "cuda": dict(BLOCK_N=128, BLOCK_K=64, TILE=8192, num_warps=4, num_stages=3),
    "interpreter": dict(BLOCK_N=256, BLOCK_K=128, TILE=1 << 20, num_warps=1, num_stages=1),
}
SUMMARY_N = 32  # head rows per block summary, several per program: the unit of rescoring
STAGE_A_BLOCKS = 2  # summary blocks of highest upper bound rescored first (64 tokens)
STAGE_B_BLOCKS = 6  # the next ones, for rows stage a leaves uncertified (192 tokens more)
MAX_DRAFT_ROWS = 16  # draft rows per launch, all in every program; more take more launches


@triton.jit
def _bf16_bits(value):
    """float32 -> BF16 rounded to nearest, ties to even, on the bit pattern (the interpreter's
    own downcast truncates): the BF16 bits as int16, and the rounded value as float32. Adding
    0x7FFF plus the lowest kept bit carries into the kept 16 bits exactly when the dropped 16
    exceed half a step, or equal it with the kept part odd; a carry out of the significand
    steps the exponent, as it should. No finite value or infinity overflows the int32 sum;
    NaN is kept NaN."""
    bits = value.to(tl.int32, bitcast=True)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    rounded = tl.where(value != value, 0x7FC00000, rounded)
    kept = (rounded & -65536).to(tl.float32, bitcast=True)  # -65536 == 0xFFFF0000
    return (rounded >> 16).to(tl.int16), kept


@triton.jit
def _head_blocks(
    x_ptr, w_ptr, scale_ptr, coef_ptr, terms_ptr, blocked_ptr,
    out_ptr, best_ptr, first_ptr, upper_ptr,
    draft_rows, vocab, hidden, slope,
    x_stride, w_stride, coef_stride, out_stride, summary_stride,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SUMMARY_N: tl.constexpr,
):  # fmt: skip
    block = tl.program_id(0)
    m = tl.arange(0, ROWS)
    n = block * BLOCK_N + tl.arange(0, BLOCK_N)
    live_m = m < draft_rows
    live_n = n < vocab
    # float32 products (exact: 8 x 4 significand bits) summed in float32, in whatever order the
    # reduction takes: the bound holds for any. No tl.dot: tensor cores' float32 accumulation is
    # not round-to-nearest, and tl.dot refuses fp8 x bf16 anyway.
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        live_k = k < hidden
        xs = tl.load(
            x_ptr + m[:, None] * x_stride + k[None, :],
            mask=live_m[:, None] & live_k[None, :], other=0.0,
        ).to(tl.float32)  # fmt: skip
        ws = tl.load(
            w_ptr + n[:, None] * w_stride + k[None, :],
            mask=live_n[:, None] & live_k[None, :], other=0.0,
        ).to(tl.float32)  # fmt: skip
        acc += tl.sum(xs[:, None, :] * ws[None, :, :], axis=2)
    blocked = tl.load(blocked_ptr + n) != 0  # padded to the grid: past the vocabulary too
    logits = tl.where(blocked[None, :], float("-inf"), acc * tl.load(scale_ptr))
    bits, served = _bf16_bits(logits)
    tl.store(out_ptr + m[:, None] * out_stride + n[None, :], bits, mask=live_m[:, None])

    # U_j = (1 - c0') f_j + a rows[0, j] + e rows[1, j], plus 2^-20 (|f_j| + the bound terms):
    # more than the at most five float32 roundings here (and the slope's own) can take off.
    a = tl.load(terms_ptr + m * 2, mask=live_m, other=0.0)
    e = tl.load(terms_ptr + m * 2 + 1, mask=live_m, other=0.0)
    per_a = tl.load(coef_ptr + n, mask=live_n, other=0.0)
    per_e = tl.load(coef_ptr + coef_stride + n, mask=live_n, other=0.0)
    terms = a[:, None] * per_a[None, :] + e[:, None] * per_e[None, :]
    finite = tl.where(blocked[None, :], 0.0, served)
    upper = slope * finite + terms
    upper += (tl.abs(finite) + terms) * 9.5367431640625e-07  # 2^-20
    # A logit past BF16's range (-inf served, NaN here) bounds nothing: +inf, never certified.
    upper = tl.where(upper == upper, upper, float("inf"))
    upper = tl.where(blocked[None, :], float("-inf"), upper)

    SUMMARIES: tl.constexpr = BLOCK_N // SUMMARY_N
    shape: tl.constexpr = (ROWS, SUMMARIES, SUMMARY_N)
    grouped = tl.reshape(served, shape)
    best = tl.max(grouped, axis=2)
    index = tl.reshape(tl.broadcast_to(n[None, :], (ROWS, BLOCK_N)), shape)
    first = tl.min(tl.where(grouped == best[:, :, None], index, 2147483647), axis=2)
    top = tl.max(tl.reshape(upper, shape), axis=2)
    s = block * SUMMARIES + tl.arange(0, SUMMARIES)
    at = m[:, None] * summary_stride + s[None, :]
    tl.store(best_ptr + at, best, mask=live_m[:, None])
    tl.store(first_ptr + at, first, mask=live_m[:, None])
    tl.store(upper_ptr + at, top, mask=live_m[:, None])


class Blocks(NamedTuple):
    """Stage 1's output for ``tokens`` draft rows; the logits are padded to whole programs."""

    logits: torch.Tensor  # [tokens, padded] bfloat16, -inf on blocked tokens
    best: torch.Tensor  # [tokens, summaries] float32: each block's largest logit
    first: torch.Tensor  # [tokens, summaries] int32: its lowest index
    upper: torch.Tensor  # [tokens, summaries] float32: the block's largest U_j, rounded up


def _kind(device: torch.device) -> str:
    return "cuda" if device.type == "cuda" else "interpreter"


@dataclass(frozen=True)
class FusedHead:
    """One head's constants, made once: its FP8 copy, BF16 rows, bound and blocked tokens (vocab
    padding, suppressed tokens and the rows past the vocabulary up to whole programs)."""

    weight: torch.Tensor  # [vocab, hidden] float8_e4m3fn, row-major
    scale: torch.Tensor  # [1] float32, per tensor
    rows: torch.Tensor  # [vocab, hidden] bfloat16: the head's own rows, for exact rescoring
    bound: LogitBound  # made for KERNEL_FUSED_W8A16
    blocked: torch.Tensor  # [padded] bool
    blocked_bytes: torch.Tensor  # [padded] int8, the kernel's copy
    offsets: torch.Tensor  # [SUMMARY_N] int64: a block's tokens from its first
    launch: dict
    stage_a_blocks: int = STAGE_A_BLOCKS
    stage_b_blocks: int = STAGE_B_BLOCKS

    @classmethod
    def build(
        cls, weight, scale, rows, *, bound: LogitBound, valid_rows: int, suppressed=None,
        stage_a_blocks: int = STAGE_A_BLOCKS, stage_b_blocks: int = STAGE_B_BLOCKS,
    ) -> FusedHead:  # fmt: skip
        vocab = weight.shape[0]
        if (weight.dtype, rows.dtype) != (torch.float8_e4m3fn, torch.bfloat16) or (
            rows.shape != weight.shape
        ):
            raise ValueError(
                f"need float8_e4m3fn weights and bfloat16 rows of one shape, got {weight.dtype} "
                f"{list(weight.shape)}, {rows.dtype} {list(rows.shape)}"
            )
        if bound.kernel != KERNEL_FUSED_W8A16 or bound.rows.shape != (2, vocab):
            raise ValueError(f"the bound must be {KERNEL_FUSED_W8A16!r}'s for these {vocab} rows")
        launch = dict(LAUNCH[_kind(weight.device)])
        padded = triton.cdiv(vocab, launch["BLOCK_N"]) * launch["BLOCK_N"]
        blocked = torch.arange(padded, device=weight.device) >= min(valid_rows, vocab)
        if suppressed is not None and suppressed.numel():
            blocked[suppressed] = True
        summaries = padded // SUMMARY_N
        a = min(stage_a_blocks, summaries)
        return cls(
            weight.contiguous(), scale.float().reshape(1), rows, bound, blocked,
            blocked.to(torch.int8), torch.arange(SUMMARY_N, device=weight.device), launch,
            a, min(stage_b_blocks, summaries - a),
        )  # fmt: skip

    def head_blocks(self, x: torch.Tensor) -> Blocks:
        """Stage 1: one launch per ``MAX_DRAFT_ROWS`` draft rows of ``x`` ``[tokens, hidden]``."""
        tokens, (vocab, hidden) = x.shape[0], self.weight.shape
        padded = self.blocked.shape[0]
        summaries = padded // SUMMARY_N
        out = torch.empty(tokens, padded, dtype=torch.bfloat16, device=x.device)
        best = torch.empty(tokens, summaries, dtype=torch.float32, device=x.device)
        first = torch.empty(tokens, summaries, dtype=torch.int32, device=x.device)
        upper = torch.empty_like(best)
        x = x.contiguous()
        terms = self.bound.terms(x).contiguous()
        slope = 1.0 - self.bound.rounding_slope
        launch = dict(self.launch)
        tile, block_n = launch.pop("TILE"), launch.pop("BLOCK_N")
        for start in range(0, tokens, MAX_DRAFT_ROWS):
            part = slice(start, start + MAX_DRAFT_ROWS)
            count = min(MAX_DRAFT_ROWS, tokens - start)
            rows = triton.next_power_of_2(count)
            block_k = max(16, min(launch["BLOCK_K"], tile // (rows * block_n)))
            _head_blocks[(padded // block_n,)](
                x[part], self.weight, self.scale, self.bound.rows, terms[part],
                self.blocked_bytes, out[part].view(torch.int16), best[part], first[part],
                upper[part], count, vocab, hidden, slope, x.stride(0), self.weight.stride(0),
                self.bound.rows.stride(0), out.stride(0), best.stride(0), ROWS=rows,
                BLOCK_N=block_n, BLOCK_K=block_k, SUMMARY_N=SUMMARY_N,
                num_warps=launch["num_warps"], num_stages=launch["num_stages"],
            )  # fmt: skip
        return Blocks(out, best, first, upper)

    def _stage(self, x, upper, extra, blocks, before: _Stage | None) -> _Stage:
        """Rescore every token of ``blocks`` ``[tokens, n]`` exactly; certify the rest."""
        candidates = (blocks.unsqueeze(-1) * SUMMARY_N + self.offsets).flatten(1)
        invalid = self.blocked[candidates]
        # Past the vocabulary a candidate reads the last row instead: it is -inf anyway.
        inside = candidates.clamp(max=self.rows.shape[0] - 1)
        exact = exact_logits(self.rows, inside, x).masked_fill(invalid, float("-inf"))
        upper.scatter_(-1, blocks, float("-inf"))
        return joined(before, candidates, exact, invalid, upper, extra)

    def certify(
        self, x: torch.Tensor, blocks: Blocks, *, host_sync: bool = True, totals=None
    ) -> Certified:
        """Stage 2 on stage 1's ``blocks`` (used up: the logits are served in place, the upper
        bounds overwritten): ``certified_pick``'s contract and counts. With ``host_sync=False``
        nothing is read by the host and every shape is static."""
        vocab = self.rows.shape[0]
        flat, upper = blocks.logits, blocks.upper
        extra = self.bound.extra(blocks.best.amax(-1))
        a = self._stage(x, upper, extra, upper.topk(self.stage_a_blocks, -1).indices, None)
        if (host_sync and bool(a.certified.all())) or self.stage_b_blocks == 0:
            served, b_certified = a, torch.zeros_like(a.certified)
        else:
            wide = upper.topk(self.stage_b_blocks, -1).indices  # stage a's blocks are -inf
            served = self._stage(x, upper, extra, wide, a)
            b_certified = served.certified & ~a.certified
        serve(flat, served.candidates, served.exact, served.invalid)
        logits = flat[:, :vocab]
        rest = ~(a.certified | b_certified)
        if host_sync and bool(rest.any()):
            left = rest.nonzero().squeeze(-1)
            logits[left] = every_row(self.rows, x[left], self.blocked[:vocab], flat.dtype)
        none = torch.zeros_like(rest.sum())
        # As certified_pick counts: with no host sync stage c never ran, stage b served the rest.
        last = [rest.sum(), none] if host_sync else [none, rest.sum()]
        counts = torch.stack([a.certified.sum(), b_certified.sum(), *last])
        if totals is not None:
            totals.add_(counts)
        return Certified(logits, counts)

    @torch.no_grad()
    def pick(self, hidden: torch.Tensor, *, host_sync: bool = True, totals=None) -> Certified:
        """Both stages on ``hidden`` ``[..., hidden]``: logits ``[..., vocab]`` (a view of the
        padded buffer) whose argmax is the BF16 head's on every certified row, and on every row
        when ``host_sync``."""
        x = hidden.reshape(-1, hidden.shape[-1])
        out = self.certify(x, self.head_blocks(x), host_sync=host_sync, totals=totals)
        return Certified(out.logits.view(*hidden.shape[:-1], -1), out.counts)


def fused_certified_pick(
    x, weight, scale, rows_bf16, *, bound: LogitBound, valid_rows: int, suppressed=None,
    host_sync: bool = True, totals=None,
) -> Certified:  # fmt: skip
    """One call of ``FusedHead.pick``, building the head's constants first (a server builds the
    ``FusedHead`` once and calls ``pick``)."""
    head = FusedHead.build(
        weight, scale, rows_bf16, bound=bound, valid_rows=valid_rows, suppressed=suppressed
    )
    return head.pick(x, host_sync=host_sync, totals=totals)
