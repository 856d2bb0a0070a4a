"""The fused Triton kernel (``draft_head_fp8.fused_head``: the FP8 scan, its block summaries and the
certified pick in one launch and a small second stage) as the head method's kernel: in the shape
of vLLM's FP8 linear kernels (``process_weights_after_loading``, the plain ``[hidden, vocab]``
layout with one ``[1]`` scale that receipt v2 proves), plus the pick it serves.

It serves where ``DRAFT_HEAD_FP8_KERNEL`` says (settings.HEAD_KERNELS): on CUDA by default, on a
CPU only under Triton's interpreter (``TRITON_INTERPRET=1``: for tests; a CPU's Triton has no
backend of its own here). It serves the certified pick only (its second stage is the pick), so
plain FP8 logits and an uncertified rescoring stay with vLLM's kernels.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.settings import CERTIFY_ENV, HEAD_KERNEL_ENV, RESCORE_ENV

INTERPRET_ENV = "TRITON_INTERPRET"


def unavailable(device_type: str, *, certify: bool, rescore_k: int) -> str | None:
    """Why the fused kernel cannot serve this head here, else None (a pure check: nothing runs)."""
    if not certify or rescore_k == 0:
        return (
            f"the fused Triton kernel serves the certified pick only ({CERTIFY_ENV}=off and "
            f"{RESCORE_ENV}=0 need {HEAD_KERNEL_ENV}=vllm)"
        )
    if device_type == "cuda":
        return None
    if device_type == "cpu" and os.environ.get(INTERPRET_ENV, "0") not in ("", "0"):
        return None
    return (
        f"the fused Triton kernel runs on CUDA, and on a CPU only under Triton's interpreter "
        f"({INTERPRET_ENV}=1, for tests); this is {device_type} without it"
    )


class FusedW8A16HeadKernel:
    """The head's FP8 weight stays as made (the plain layout); the pick runs through a
    ``FusedHead`` made from the head method's own tensors, made again whenever they change (a
    weight update re-makes the bound and may hand new rows)."""

    def __init__(self) -> None:
        self.head: Any = None  # fused_head.FusedHead
        self._made_from: tuple = ()

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Nothing to repack: the kernel reads the ``[vocab, hidden]`` rows of the plain layout."""

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: Any = None) -> Any:
        raise RuntimeError(
            "FusedW8A16HeadKernel serves the certified pick (pick()), not plain FP8 logits"
        )

    def pick(self, method: Any, layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The certified pick's logits for draft rows ``x`` (``certified_pick``'s contract and
        counts); a CUDA graph being captured gets no host read (stage c left out, counted)."""
        from draft_head_fp8.fused_head import FusedHead

        made_from = (layer.weight, layer.weight_scale, method.rescore_rows, method.bound)
        if self.head is None or any(a is not b for a, b in zip(made_from, self._made_from)):
            self.head = FusedHead.build(
                layer.weight.t(), layer.weight_scale, method.rescore_rows, bound=method.bound,
                valid_rows=method.real_rows, suppressed=method.suppressed,
            )  # fmt: skip
            self._made_from = made_from
        capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
        return self.head.pick(x, host_sync=not capturing, totals=method.pick_counts).logits


def probe(hidden: int, device: torch.device) -> str | None:
    """Run the fused kernel once on a tiny head of this width on ``device``: why it cannot serve
    here (its own message), else None. A kernel that compiles is not yet one that picks right:
    the pick is checked against the exact argmax."""
    try:
        from draft_head_fp8.certificate import KERNEL_FUSED_W8A16, logit_bound, row_error_norms
        from draft_head_fp8.fp8 import quantize_per_tensor
        from draft_head_fp8.fused_head import FusedHead
        from draft_head_fp8.rescore import exact_logits

        gen = torch.Generator().manual_seed(0)
        rows = (torch.randn(300, hidden, generator=gen) * 0.05).bfloat16().to(device)
        head = quantize_per_tensor(rows)
        errors = row_error_norms(rows, head, kernel=KERNEL_FUSED_W8A16)
        bound = logit_bound(errors, hidden=hidden, kernel=KERNEL_FUSED_W8A16)
        fused = FusedHead.build(head.weight, head.scale, rows, bound=bound, valid_rows=300)
        x = torch.randn(3, hidden, generator=gen).bfloat16().to(device)
        picked = fused.pick(x).logits.argmax(-1)
        every = torch.arange(300, device=device).expand(3, 300)
        wanted = exact_logits(rows, every, x).argmax(-1)
    except Exception as exc:  # any failure to run is the reason, in the kernel's own words
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    if not torch.equal(picked, wanted):
        return "its pick differs from the exact argmax on a tiny head"
    return None


def refuse(reason: str) -> HeadFp8EligibilityError:
    return HeadFp8EligibilityError(f"{HEAD_KERNEL_ENV}=triton: {reason}")
