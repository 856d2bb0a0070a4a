"""Mechanism: the torch work. Per-tensor FP8 quantization of a head, finiteness and scale checks,
hashing of tensor bytes. Everything streams over the tensor in bounded pieces: a 262144 x 1024 head
is never converted whole (a float32 copy of it would be 1 GiB).

torch is imported inside the functions so that importing this module, like the package, stays free
of torch; callers that reach these functions already hold tensors.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

FP8_E4M3_MAX = 448.0
# At most this many elements are converted (to float32) at a time: 1 Mi x 4 B = 4 MiB, which stays
# in cache while a piece goes through division, clamping and conversion. Measured on a 2-core
# Xeon: 16 MiB pieces made the same work 5x slower.
CHUNK_ELEMENTS = 1024 * 1024
# Bytes copied off an accelerator per hashing step.
_HASH_CHUNK_BYTES = 64 * 1024 * 1024


class NonFiniteHeadError(ValueError):
    """The head to quantize holds NaN or inf: its FP8 copy would be garbage."""


@dataclass(frozen=True)
class QuantizedHead:
    weight: (
        Any  # float8_e4m3fn, [vocab, hidden], contiguous (callers store its .t(): [hidden, vocab])
    )
    scale: Any  # float32, shape [1]: amax / 448
    amax: float
    row_amax_max: float
    row_amax_median: float

    @property
    def row_amax_ratio(self) -> float:
        # How much a per-tensor scale costs the typical row: the median row uses only
        # 1/ratio of the FP8 range the largest row sets.
        return (
            self.row_amax_max / self.row_amax_median if self.row_amax_median > 0 else float("inf")
        )


def _rows_per_chunk(tensor: Any) -> int:
    width = max(1, tensor[0].numel()) if tensor.dim() > 1 and tensor.shape[0] else 1
    return max(1, CHUNK_ELEMENTS // width)


def head_amax(weight: Any) -> float:
    """max |w| of a 2-D ``[vocab, hidden]`` head in one streaming ``aminmax`` pass, which
    propagates NaN and inf: a broken head is caught before anything is written."""
    import torch

    if weight.dim() != 2:
        raise ValueError(f"head weight must be 2-D [vocab, hidden], got shape {list(weight.shape)}")
    if weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"head weight must be bf16/fp16/fp32 before quantization, got {weight.dtype}"
        )
    lo, hi = weight.aminmax()
    amax = float(torch.maximum(lo.abs(), hi.abs()).to(torch.float32))
    if not math.isfinite(amax):
        raise NonFiniteHeadError(
            f"head weight holds NaN or inf (first in row {_first_non_finite_row(weight)}); "
            "refusing to quantize it to FP8"
        )
    return amax


def quantize_per_tensor(
    weight: Any, *, amax: float | None = None, real_rows: int | None = None
) -> QuantizedHead:
    """Round-to-nearest, saturating per-tensor FP8 (e4m3fn) of a 2-D ``[vocab, hidden]`` weight.

    Two streaming passes over the source: ``head_amax`` for the scale (skipped when ``amax`` is
    given: a tensor-parallel shard quantizes with the whole head's amax, so that every rank
    computes what TP 1 computes), then quantization through one reused float32 buffer of at most
    ``CHUNK_ELEMENTS``. Only torch ops that exist on every backend. ``real_rows``: how many leading
    rows are real (the rest is vocab padding), for the row statistics.
    """
    import torch

    local = head_amax(weight) if amax is None else amax
    if local == 0.0:
        raise NonFiniteHeadError("head weight is all zeros: its FP8 scale would be 0")
    amax_t = torch.tensor(local, dtype=torch.float32, device=weight.device)
    # A float32 divisor with a dimension promotes the bf16 rows to float32 inside the division
    # (true division, as vLLM's own quantizers do), with no separate conversion pass.
    scale = (amax_t / torch.tensor(FP8_E4M3_MAX, device=weight.device)).reshape(1)
    vocab, hidden = weight.shape
    out = torch.empty((vocab, hidden), dtype=torch.float8_e4m3fn, device=weight.device)
    row_amax = torch.empty(vocab, dtype=torch.float32, device=weight.device)
    step = _rows_per_chunk(weight)
    buffer = torch.empty(min(step, vocab) * hidden, dtype=torch.float32, device=weight.device)
    for start in range(0, vocab, step):
        rows = weight[start : start + step]
        piece = buffer[: rows.numel()].view(rows.shape)
        torch.div(rows, scale, out=piece)
        piece.clamp_(-FP8_E4M3_MAX, FP8_E4M3_MAX)
        out[start : start + step].copy_(piece)
        # Row amax for the diagnostics, in scaled units, from the buffer while it is still warm.
        torch.amax(piece.abs_(), dim=1, out=row_amax[start : start + step])
    row_amax.mul_(scale)
    real = row_amax[: vocab if real_rows is None else max(1, real_rows)]
    return QuantizedHead(
        weight=out,
        scale=scale,
        amax=local,
        row_amax_max=float(real.max()),
        row_amax_median=float(real.median()),
    )


def _first_non_finite_row(weight: Any) -> int:
    import torch

    step = _rows_per_chunk(weight)
    for start in range(0, weight.shape[0], step):
        bad = (~torch.isfinite(weight[start : start + step])).any(dim=1).nonzero()
        if bad.numel():
            return start + int(bad[0])
    return -1


def _flat_storage_view(tensor: Any) -> Any | None:
    """A 1-D view over exactly the tensor's elements when they are dense in memory in some order
    (contiguous, or a permutation such as the transposed FP8 head); None otherwise."""
    if tensor.is_contiguous():
        return tensor.reshape(-1)
    order = sorted(range(tensor.dim()), key=lambda d: tensor.stride(d), reverse=True)
    permuted = tensor.permute(order)
    return permuted.reshape(-1) if permuted.is_contiguous() else None


def _pieces(tensor: Any, *, in_place: bool = False):
    """The tensor's elements, a bounded piece at a time, without copying when memory is dense.

    ``in_place``: the caller only reduces (allocates and converts nothing), so dense memory is
    handed over whole; splitting it would only add per-call overhead.
    """
    flat = _flat_storage_view(tensor)
    if flat is not None:
        step = flat.numel() if in_place else CHUNK_ELEMENTS
        for start in range(0, flat.numel(), max(1, step)):
            yield flat[start : start + step]
        return
    rows = tensor if tensor.dim() > 1 else tensor.reshape(1, -1)
    step = _rows_per_chunk(rows)
    for start in range(0, rows.shape[0], step):
        yield rows[start : start + step].reshape(-1)


def is_finite(tensor: Any) -> bool:
    """No NaN and no inf anywhere in ``tensor``, checked without a float32 copy of it."""
    import torch

    if tensor.numel() == 0 or not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    if tensor.dtype == torch.float8_e4m3fn:
        # e4m3fn has no inf; NaN is S.1111.111, i.e. byte 0x7F or 0xFF. Over the raw bytes, 0xFF
        # is the unsigned maximum and 0x7F the signed one: two plain reductions, no conversion.
        for piece in _pieces(tensor, in_place=True):
            raw = piece.view(torch.uint8)
            if int(raw.max()) == 0xFF or int(raw.view(torch.int8).max()) == 0x7F:
                return False
        return True
    for piece in _pieces(tensor, in_place=tensor.dtype != torch.float8_e5m2):
        if piece.is_complex():
            piece = torch.view_as_real(piece)
        # min and max propagate NaN, and inf is an extreme: one pass, nothing allocated.
        lo, hi = piece.aminmax() if piece.dtype != torch.float8_e5m2 else piece.float().aminmax()
        if not (bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))):
            return False
    return True


def is_positive_scalar(tensor: Any) -> bool:
    """Exactly one element, finite and > 0: the only usable per-tensor scale."""
    import math

    if tensor.numel() != 1:
        return False
    value = float(tensor.reshape(-1)[:1].float()[0])
    return math.isfinite(value) and value > 0


def tensor_sha256(tensor: Any, *, rows: int | None = None) -> str:
    """SHA-256 of the tensor's bytes in row-major order (of its first ``rows`` rows if given).

    Reads CPU tensors in place; copies accelerator tensors to host a bounded piece at a time.
    """
    import torch

    if rows is not None:
        tensor = tensor[:rows]
    digest = hashlib.sha256()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()  # rare here (heads are contiguous [vocab, hidden])
    flat = tensor.reshape(-1).view(torch.uint8)
    step = _HASH_CHUNK_BYTES
    for start in range(0, flat.numel(), step):
        piece = flat[start : start + step]
        if piece.device.type != "cpu":
            piece = piece.cpu()
        digest.update(memoryview(piece.numpy()))
    return digest.hexdigest()
