"""Which path serves each draft logits call: the FP8 head + exact pick, or the BF16 rows the pick
already keeps, by the number of rows in the call.

On a CPU the FP8 head pays at small batches (its bytes are half) and loses at large ones (the
W8A16 op converts FP8 to BF16 per tile; measured in the real engine at 1024 x 262144 on a 2-core
AVX512-BF16 EPYC: 0.36x the BF16 head at batch 1, 1.13x at 8, 1.58x at 32; docs/benchmarks.md).
Both paths give the BF16 head's draft token, so the faster one serves: measured at load on this
rank's head (``DRAFT_HEAD_FP8_BF16_FROM=auto``), or as the user set it. The BF16 path is vLLM's own
unquantized head GEMM on those rows (``UnquantizedEmbeddingMethod``), so its logits are exactly
the stock head's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from draft_head_fp8.policy import bf16_from_measured
from draft_head_fp8.settings import BF16_FROM_AUTO, BF16_FROM_NEVER
from draft_head_fp8.vllm_plugin import seams

ParallelLMHead = seams.read("parallel_lm_head")
UnquantizedEmbeddingMethod = seams.read("unquantized_embedding_method")

MEASURED_ROWS = (1, 2, 4, 8, 16, 32)
_REPEATS = 3


def head_holder(rows: torch.Tensor) -> torch.nn.Module:
    """A ``ParallelLMHead`` holding ``rows`` and nothing else: vLLM's unquantized head method
    prepares a head by its class (0.34 gives only a ``ParallelLMHead`` its CUDA skinny GEMM), so
    the holder must be one. Built without ``ParallelLMHead.__init__``, which would allocate a
    vocab shard of its own and needs the engine's tensor-parallel group."""
    holder = object.__new__(ParallelLMHead)
    torch.nn.Module.__init__(holder)
    holder.weight = (
        rows
        if isinstance(rows, torch.nn.Parameter)
        else torch.nn.Parameter(rows, requires_grad=False)
    )
    return holder


class BF16Head:
    """vLLM's stock BF16 head computation over given rows, as the installed vLLM prepares and
    runs a head: on a CPU, the GEMM ``dispatch_cpu_unquantized_gemm`` prepares (oneDNN holds its
    own reordered copy); on CUDA with vLLM 0.34, its skinny GEMM where it has a plan."""

    def __init__(self, rows: torch.Tensor, layer: torch.nn.Module | None = None) -> None:
        if layer is None:  # rows of our own: a holder head, prepared as vLLM prepares a head
            layer = head_holder(rows)
            UnquantizedEmbeddingMethod().process_weights_after_loading(layer)
        self.layer = layer  # the target's own head, already prepared, when the rows are its
        self.method = getattr(layer, "quant_method", None) or UnquantizedEmbeddingMethod()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.method.apply(self.layer, x, bias)


def _seconds(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> float:
    samples = []
    for _ in range(_REPEATS):
        started = time.perf_counter()
        fn(x)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


@torch.no_grad()
def measure(
    fp8: Callable[[torch.Tensor], Any], bf16: BF16Head, hidden: int, dtype: torch.dtype
) -> list[tuple[int, float, float]]:
    """(rows, FP8 + pick seconds, BF16 seconds) per size, interleaved, after one warm-up each."""
    gen = torch.Generator().manual_seed(0)
    measured = []
    for rows in MEASURED_ROWS:
        x = torch.randn(rows, hidden, generator=gen).to(dtype)
        fp8(x), bf16(x)  # warm up: lazy initialisation is not the call's cost
        measured.append((rows, _seconds(fp8, x), _seconds(bf16, x)))
    return measured


def choose(
    setting: str | int,
    *,
    device: torch.device,
    fp8: Callable[[torch.Tensor], Any],
    bf16: Callable[[], BF16Head],
    hidden: int,
    dtype: torch.dtype,
) -> tuple[int | None, BF16Head | None, dict]:
    """(rows from which BF16 serves or None, the BF16 head if it ever serves, the record).

    On a CPU both paths are measured whatever the setting, so the record always says what the
    default would choose here; the BF16 head is kept only if it serves."""
    record: dict[str, Any] = {"setting": setting, "device": device.type, "measured": None}
    head = None
    measured_from = None
    if device.type == "cpu":
        head = bf16()
        measured = measure(fp8, head, hidden, dtype)
        record["measured"] = [
            {"rows": r, "fp8_ms": round(1e3 * f, 4), "bf16_ms": round(1e3 * b, 4)}
            for r, f, b in measured
        ]
        measured_from = bf16_from_measured(measured)
        record["measured_bf16_from"] = measured_from
    if setting == BF16_FROM_NEVER:
        threshold = None
    elif setting == BF16_FROM_AUTO:
        threshold = measured_from
        if device.type != "cpu":
            # Not measured here: vLLM replays the draft from CUDA graphs, where the pick costs a
            # sixth of what it costs eagerly (H200, docs/benchmarks.md "On a GPU"), so timing
            # both paths eagerly at load would choose wrongly. The user guide says when to keep
            # the flag off on a GPU.
            record["why"] = f"not measured on {device.type}: the FP8 head serves every batch"
    else:
        threshold = int(setting)
    record["bf16_from"] = threshold
    if threshold is None:
        return None, None, record
    return threshold, head or bf16(), record
