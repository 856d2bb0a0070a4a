"""Benchmark: quantizing a full-size BF16 draft head (vocab 262144 x hidden 1024) to FP8 on this
machine, the way the plugin does at load (``draft_head_fp8.fp8.quantize_per_tensor``), plus the
provenance hash of the BF16 bytes it was made from.

Yardstick, in the same run: one plain pass over the BF16 bytes (``w.view(torch.int16).max()``).
Targets (issue): quantization <= 3 passes, <= 64 MiB extra beyond the 256 MiB FP8 result.

On CUDA (``--device cuda``, the default when one is present) the same pure-torch code runs on the
GPU; peak extra memory is then torch's allocator peak, and time is synchronized.

Usage: python -m bench.head_quantize [--runs N] [--device cpu|cuda] [--json PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench.measure import (
    MIB,
    environment,
    interleaved_medians,
    peak_extra,
    run_memory_child,
    write_json,
)
from draft_head_fp8.fp8 import CHUNK_ELEMENTS, quantize_per_tensor, tensor_sha256

VOCAB, HIDDEN = 262144, 1024
RESULTS = Path(__file__).resolve().parent / "results"


def build(device: str) -> torch.Tensor:
    torch.manual_seed(0)
    return (torch.randn(VOCAB, HIDDEN, device=device) * 0.02).to(torch.bfloat16)


def synced(fn, device: str):
    def run():
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    return run


def operations(w: torch.Tensor) -> dict:
    device = w.device.type
    return {
        "quantize": synced(lambda: quantize_per_tensor(w), device),
        "provenance_sha256": synced(lambda: tensor_sha256(w), device),
        "yardstick": synced(lambda: w.view(torch.int16).max(), device),
    }


def cuda_peak_extra(ops: dict) -> dict:
    out = {}
    for name, op in ops.items():
        op()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        op()
        out[name] = torch.cuda.max_memory_allocated() - before
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.json = args.json or RESULTS / (
        "head_quantize.json" if args.device == "cpu" else f"head_quantize_{args.device}.json"
    )
    w = build(args.device)
    if args.memory_child:
        import json

        print(json.dumps(peak_extra(operations(w))))
        return

    env = environment()
    q = quantize_per_tensor(w)
    exact = (w.float() / q.scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(exact.view(torch.uint8), q.weight.view(torch.uint8)), "not round-to-nearest"
    del exact
    times = interleaved_medians(operations(w), args.runs)
    memory = (
        cuda_peak_extra(operations(w))
        if args.device == "cuda"
        else run_memory_child(__spec__.name, "--device", "cpu")
    )
    fp8_bytes = VOCAB * HIDDEN
    quant, sha, yard = (
        times[k]["median_s"] for k in ("quantize", "provenance_sha256", "yardstick")
    )
    extra = memory["quantize"] - fp8_bytes
    result = {
        "benchmark": "head_quantize",
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "shape": {
            "vocab": VOCAB,
            "hidden": HIDDEN,
            "bf16_bytes": 2 * fp8_bytes,
            "fp8_bytes": fp8_bytes,
        },
        "chunk_elements": CHUNK_ELEMENTS,
        **env,
        "runs": args.runs,
        "times": times,
        "quantize_over_yardstick": quant / yard,
        "sha256_over_yardstick": sha / yard,
        "peak_extra_bytes": memory,
        "quantize_extra_beyond_fp8_result_bytes": extra,
        "targets": {
            "passes_max": 3,
            "extra_mib_max": 64,
            "passes_met": quant / yard <= 3,
            "memory_met": extra <= 64 * MIB,
        },
    }
    write_json(args.json, result)
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    print(
        f"262144 x 1024 bf16 head -> float8_e4m3fn on {result['device']}, torch {env['torch']}, "
        f"{env['torch_threads']} threads, "
        f"median of {args.runs}, load average at start {env['load_average_at_start'][0]:.2f}"
    )
    print()
    print("| operation | time (median) | passes | peak extra memory |")
    print("| --- | ---: | ---: | ---: |")
    print(
        f"| quantize (amax + RTN saturating FP8, row amax) | {ms(quant)} | {quant / yard:.1f} | "
        f"{extra / MIB:.1f} MiB beyond the 256 MiB result |"
    )
    print(
        f"| provenance: sha256 of the 512 MiB BF16 source | {ms(sha)} | {sha / yard:.1f} | "
        f"{memory['provenance_sha256'] / MIB:.1f} MiB |"
    )
    print(
        f"| yardstick: one pass over the BF16 bytes | {ms(yard)} | 1.0 | "
        f"{memory['yardstick'] / MIB:.1f} MiB |"
    )
    print()
    print(
        f"targets: <= 3 passes {'met' if quant / yard <= 3 else 'NOT met'}, "
        f"<= 64 MiB extra {'met' if extra <= 64 * MIB else 'NOT met'}  ->  {args.json}"
    )


if __name__ == "__main__":
    main()
