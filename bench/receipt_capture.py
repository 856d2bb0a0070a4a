"""Benchmark: capturing a runtime receipt for a full-size FP8 draft head on this CPU.

The head is Gemma 4's shape: vocab 262144 x hidden 1024. Its weight is ``float8_e4m3fn`` stored
``[hidden, vocab]`` as the ``.t()`` of a contiguous ``[vocab, hidden]`` tensor (the quantized copy
of a random BF16 embedding, so the bytes are realistic, not zeros), with an FP32 ``[1]`` scale; the
BF16 ``[vocab, hidden]`` embedding is shared between draft and target, and tied to the target's
head.

Measured, all in this process with torch's default thread count, each the median of ``--runs``
interleaved runs (``--overlay-runs`` for the slow overlay check):

- ``make_runtime_receipt`` (the whole capture: every snapshot, the FP8 finiteness check on raw
  bytes, the scale check, the identity flags);
- the yardstick: one plain pass over the FP8 weight's bytes, ``w.view(torch.uint8).max()`` over its
  contiguous storage -- the least any check that reads every byte can cost;
- the overlay's way for comparison: 8 Mi-element chunks of the same contiguous storage converted to
  float32, then ``torch.isfinite(chunk).all()``.

Peak extra memory is measured in a fresh child process (``--memory-child``), because tracemalloc
does not see torch's allocations. There, before each operation, the kernel's resident high-water
mark ``VmHWM`` is reset to the current RSS by writing ``5`` to ``/proc/self/clear_refs``; afterwards
``VmHWM - VmRSS(before)`` is the most memory the operation ever held resident on top of what was
there. The child runs with ``MALLOC_MMAP_THRESHOLD_=65536``: a fixed threshold makes glibc serve
every block of 64 KiB or more with its own mmap and unmap it on free, so a temporary buffer cannot
hide in heap pages that an earlier free left resident (with the default, dynamic threshold, blocks
up to 32 MiB can be recycled that way and would be invisible to VmHWM). Timings are not taken there.

Usage: python -m bench.receipt_capture [--runs N] [--overlay-runs N] [--json PATH]
Run it on an otherwise idle machine: the capture/yardstick ratio is a ratio of two memory-bound
passes, and other processes' load shifts it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

import draft_head_fp8
from bench.measure import MIB, interleaved_medians, peak_extra, run_memory_child, write_json
from draft_head_fp8 import eligibility, make_runtime_receipt, validate_post_share_receipt
from draft_head_fp8.fp8 import quantize_per_tensor
from tools.vllm_standins import (
    Fp8PerTensorOnlineLinearMethod,
    ParallelLMHead,
    TargetLM,
    UnquantizedEmbeddingMethod,
)

VOCAB, HIDDEN = 262144, 1024
OVERLAY_CHUNK = 8 * 1024 * 1024  # elements per float32 conversion in the overlay's check
RESULTS = Path(__file__).resolve().parent / "results" / "receipt_capture.json"


def build(seed: int = 0) -> SimpleNamespace:
    torch.manual_seed(seed)
    embed = nn.Embedding(
        VOCAB,
        HIDDEN,
        dtype=torch.bfloat16,
        _weight=torch.empty(VOCAB, HIDDEN, dtype=torch.bfloat16),
    )
    with torch.no_grad():
        embed.weight.normal_(0.0, 0.02)  # in place: no float32 temporary of the whole table
    embed.weight.requires_grad_(False)
    embed.quant_method = UnquantizedEmbeddingMethod()
    q = quantize_per_tensor(embed.weight)  # [vocab, hidden] contiguous FP8 + [1] FP32 scale
    head = ParallelLMHead(
        q.weight.t(), q.scale, method=Fp8PerTensorOnlineLinearMethod(), hidden=HIDDEN, vocab=VOCAB
    )

    target_lm = TargetLM(embed)
    draft = nn.Module()
    draft.model = nn.Module()
    draft.model.embed_tokens = embed  # shared with the target after load
    draft.config = SimpleNamespace(
        text_config=SimpleNamespace(hidden_size=HIDDEN, vocab_size=VOCAB)
    )
    decision = eligibility(
        layer=head,
        quant_config=SimpleNamespace(args=SimpleNamespace(linear="fp8_per_tensor_static")),
        role="draft",
        prefix="draft_model.lm_head",
        enabled=True,
        ordered_embeddings=False,
        tie_word_embeddings=True,
        parallel_lm_head_type=ParallelLMHead,
    )
    return SimpleNamespace(
        head=head, draft=draft, target=target_lm, decision=decision, fp8=q.weight
    )


def capture(state: SimpleNamespace) -> dict:
    return make_runtime_receipt(
        head=state.head,
        draft_model=state.draft,
        target_model=state.target,
        decision=state.decision,
        phase="post_share",
    )


def yardstick(state: SimpleNamespace) -> int:
    return int(state.fp8.view(torch.uint8).max())  # one pass over the contiguous bytes


def overlay_check(state: SimpleNamespace) -> bool:
    flat = state.fp8.reshape(-1)  # contiguous storage: the overlay's most favourable case
    for start in range(0, flat.numel(), OVERLAY_CHUNK):
        if not bool(torch.isfinite(flat[start : start + OVERLAY_CHUNK].to(torch.float32)).all()):
            return False
    return True


OPERATIONS = {"capture": capture, "yardstick": yardstick, "overlay_check": overlay_check}


def bound(state: SimpleNamespace) -> dict:
    return {name: (lambda op=op: op(state)) for name, op in OPERATIONS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--overlay-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(peak_extra(bound(build()))))
        return

    load_at_start = os.getloadavg()
    state = build()
    receipt = capture(state)
    validate_post_share_receipt(receipt)  # the captured receipt is a valid one
    assert receipt["head_weight"]["finite"] is True and receipt["head_weight"]["shape"] == [
        HIDDEN,
        VOCAB,
    ]
    assert overlay_check(state) is True
    # Interleaved, so machine noise hits all of them alike; the overlay check takes seconds a run.
    times = interleaved_medians(bound(state), args.runs, {"overlay_check": args.overlay_runs})
    memory = run_memory_child(__spec__.name)

    cap, yard, overlay = (times[k]["median_s"] for k in ("capture", "yardstick", "overlay_check"))
    result = {
        "benchmark": "receipt_capture",
        "shape": {"vocab": VOCAB, "hidden": HIDDEN, "fp8_weight_bytes": VOCAB * HIDDEN},
        "runs": args.runs,
        "load_average_at_start": load_at_start,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "draft_head_fp8": draft_head_fp8.__version__,
        "times": times,
        "capture_over_yardstick": cap / yard,
        "overlay_over_capture": overlay / cap,
        "peak_extra_bytes": memory,
        "targets": {
            "capture_over_yardstick_max": 2.0,
            "capture_peak_extra_mib_max": 32,
            "met": cap / yard <= 2.0 and memory["capture"] <= 32 * MIB,
        },
    }
    write_json(args.json, result)

    ms = lambda s: f"{s * 1000:.1f} ms"  # noqa: E731
    mib = lambda b: f"{b / MIB:.1f} MiB"  # noqa: E731
    rows = [
        ("receipt capture (`make_runtime_receipt`)", ms(cap), mib(memory["capture"])),
        (
            "yardstick: `w.view(torch.uint8).max()`, one pass over the 256 MiB",
            ms(yard),
            mib(memory["yardstick"]),
        ),
        (
            "overlay-style check: 8 Mi-element float32 chunks + `isfinite().all()`",
            ms(overlay),
            mib(memory["overlay_check"]),
        ),
    ]
    print(
        f"262144 x 1024 float8_e4m3fn head, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, "
        f"median of {args.runs} runs ({args.overlay_runs} for the overlay check), "
        f"load average at start {load_at_start[0]:.2f}"
    )
    print()
    print("| operation | time (median) | peak extra memory |")
    print("| --- | ---: | ---: |")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")
    print(f"| capture / yardstick (target <= 2x) | {cap / yard:.2f}x | |")
    print(f"| overlay check / capture (speedup) | {overlay / cap:.1f}x | |")
    print()
    print(f"targets met: {result['targets']['met']}  ->  {args.json}")


if __name__ == "__main__":
    main()
