"""The draft heads the benchmarks compare, in plain torch (no vLLM: they also run on a GPU
machine with torch alone).

- BF16: ``F.linear`` with a BF16 result, as vLLM's unquantized head computes it.
- FP8 W8A8 (vLLM's ``PerTensorTorchFP8ScaledMMLinearKernel``, the CUDA path): activations
  quantized dynamically per tensor as vLLM's ``QuantFP8`` does (scale = max|x| / 448 over the
  batch, clamped below at 1 / (448 * 512)), then ``torch._scaled_mm`` on the ``[hidden, vocab]``
  weight stored as ``.t()`` of the contiguous ``[vocab, hidden]`` FP8 tensor (column-major, as
  ``_scaled_mm`` wants). On CPU ``_scaled_mm`` is a slow reference path, so ``fp8_emulated``
  computes the same products in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from draft_head_fp8.fp8 import FP8_E4M3_MAX

MIN_ACT_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)  # vLLM's _FP8_MIN_SCALING_FACTOR


def quantize_activation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM ``QuantFP8`` dynamic per-tensor (forward_native, what runs on CPU)."""
    x_max = x.abs().max().unsqueeze(-1).to(torch.float32)
    scale = (x_max / FP8_E4M3_MAX).clamp(min=MIN_ACT_SCALE)
    q = (x.to(torch.float32) * scale.reciprocal()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return q.to(torch.float8_e4m3fn), scale


def scaled_mm(xq: torch.Tensor, w_t: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor):
    out = torch._scaled_mm(xq, w_t, scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out


def fp8_scaled_mm(x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Exactly the kernel's call; ``w_fp8`` is the contiguous ``[vocab, hidden]`` FP8 weight."""
    q, sx = quantize_activation(x)
    return scaled_mm(q, w_fp8.t(), sx, w_scale)


def fp8_emulated(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, chunk: int = 32768
) -> torch.Tensor:
    """``_scaled_mm`` semantics in float32 (exact products, float32 accumulation), bf16 out."""
    q, sx = quantize_activation(x)
    qf = q.to(torch.float32)
    scale = (sx * w_scale).to(torch.float32)
    out = torch.empty(x.shape[0], w_fp8.shape[0], dtype=torch.bfloat16)
    for start in range(0, w_fp8.shape[0], chunk):
        w = w_fp8[start : start + chunk].to(torch.float32)
        out[:, start : start + chunk] = ((qf @ w.t()) * scale).to(torch.bfloat16)
    return out


def fp8_w8a16(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, chunk: int = 32768
) -> torch.Tensor:
    """vLLM's CPU W8A16 op, in float32: BF16 activations against the dequantized FP8 weight."""
    xf = x.to(torch.float32)
    out = torch.empty(x.shape[0], w_fp8.shape[0], dtype=torch.bfloat16)
    for start in range(0, w_fp8.shape[0], chunk):
        w = w_fp8[start : start + chunk].to(torch.float32) * w_scale
        out[:, start : start + chunk] = (xf @ w.t()).to(torch.bfloat16)
    return out


def bf16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.linear(x.to(torch.bfloat16), w.to(torch.bfloat16))


def fp32(x: torch.Tensor, w: torch.Tensor, chunk: int = 32768) -> torch.Tensor:
    xf = x.to(torch.float32)
    out = torch.empty(x.shape[0], w.shape[0], dtype=torch.float32)
    for start in range(0, w.shape[0], chunk):
        out[:, start : start + chunk] = xf @ w[start : start + chunk].to(torch.float32).t()
    return out
