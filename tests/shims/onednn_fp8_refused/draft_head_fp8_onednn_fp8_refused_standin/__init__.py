"""Test-only: ``torch._scaled_mm`` on CPU FP8 tensors fails as oneDNN fails it on an AMX Xeon
under the suite's AVX2 emulation. See ../README.md for what it stands for and what it cannot
show."""

from __future__ import annotations

# oneDNN's words on that Xeon (shared/reference/vllm-notes.md), and whose they are here.
MESSAGE = (
    "could not create a primitive descriptor for the matmul primitive "
    "(tests/shims/onednn_fp8_refused: oneDNN capped below the CPU's FP8 path, stood in)"
)


def register() -> None:
    import torch

    original = torch._scaled_mm
    if getattr(original, "_draft_head_fp8_standin", False):
        return

    def _scaled_mm(a, b, *args, **kwargs):
        if a.device.type == "cpu" and a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise RuntimeError(MESSAGE)
        return original(a, b, *args, **kwargs)

    _scaled_mm._draft_head_fp8_standin = True
    torch._scaled_mm = _scaled_mm
