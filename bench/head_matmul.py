"""Draft-head apply: BF16 head (``F.linear``) vs the FP8 head as the plugin serves it.

    python -m bench.head_matmul [--shapes 1024x262144 5376x262144] [--batches 1 2 4 8]

Runs on whatever device is present: CUDA when available, else CPU. Needs only torch (no vLLM:
it also runs on a machine with torch alone, e.g. one H200 with Python 3.12 and torch 2.11).

The FP8 head is what vLLM's ``PerTensorTorchFP8ScaledMMLinearKernel`` does with the weight this
package produces: weight quantized per tensor (``draft_head_fp8.fp8.quantize_per_tensor`` when the
package imports; the same math inline otherwise), stored ``[hidden, vocab]`` as ``.t()`` of the
contiguous ``[vocab, hidden]`` FP8 tensor (column-major, what ``_scaled_mm`` wants), activations
quantized dynamically per tensor (max|x| / 448), then
``torch._scaled_mm(x_fp8, w_t, scale_a, scale_b, out_dtype=bfloat16)``. Two FP8 rows are timed:
``fp8_gemm`` (``_scaled_mm`` alone, activation already FP8) and ``fp8_head`` (activation quantization
in plain torch + ``_scaled_mm``, i.e. the whole apply; vLLM on CUDA quantizes with one fused custom
op instead, so on CUDA ``fp8_head`` eager is an upper bound and the CUDA-graph rows are closer to
what vLLM's captured decode runs).

Timing. CUDA: warm-up, weights rotated over enough copies that consecutive calls never reuse L2,
CUDA events around every call, median of ``--reps``; also each variant replayed from a CUDA graph.
CPU: ``time.perf_counter`` medians; ``torch._scaled_mm`` on CPU is a slow reference path
(~20 s for 1 x 1024 x 262144), so the FP8 GEMM is timed on a vocab slice (``--cpu-fp8-slice`` rows
of the weight) and scaled linearly to the full vocab; the activation quantization does not depend
on the vocab and is timed whole; one full-size FP8 call checks the extrapolation.

Bytes moved: weight + activation in + logits out (+ scales). Floor: bytes / the copy bandwidth of
this device, measured in the same run as (read + write bytes) / time of a large tensor copy.
Writes bench/results/head_matmul_<device>.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.heads import quantize_activation, scaled_mm
from draft_head_fp8.fp8 import quantize_per_tensor

ROOT = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")


def random_bf16(rows: int, cols: int, device, gen_seed: int) -> torch.Tensor:
    """N(0, 0.02) bf16 weights built in pieces (no full float32 copy)."""
    gen = torch.Generator(device=device).manual_seed(gen_seed)
    w = torch.empty(rows, cols, dtype=torch.bfloat16, device=device)
    step = max(1, (64 << 20) // (4 * cols))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        w[start : start + n] = (torch.randn(n, cols, generator=gen, device=device) * 0.02).to(
            torch.bfloat16
        )
    return w


# ------------------------------------------------------------------------------------------
# Timers
# ------------------------------------------------------------------------------------------


def time_cuda_events(fns, reps: int, warmup: int) -> float:
    """Median seconds per call; ``fns`` rotated (different weight copies)."""
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3


def time_cuda_graphs(fns, reps: int, warmup: int) -> float:
    graphs = []
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:  # warm up outside capture (cuBLAS workspace, etc.)
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for fn in fns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs.append(g)
    return time_cuda_events([g.replay for g in graphs], reps, warmup)


def time_cpu(fn, reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def copy_bandwidth(device, nbytes: int, reps: int) -> float:
    """(read + write) bytes per second of a large device-to-device tensor copy."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    if device.type == "cuda":
        t = time_cuda_events([lambda: dst.copy_(src)], reps, 3)
    else:
        t = time_cpu(lambda: dst.copy_(src), reps, 1)
    del src, dst
    return 2 * nbytes / t


# ------------------------------------------------------------------------------------------
# One shape
# ------------------------------------------------------------------------------------------


def bench_shape(hidden: int, vocab: int, args, device, quantize, bandwidth: float) -> list[dict]:
    cuda = device.type == "cuda"
    if cuda:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
        # Enough copies that each call reads weights not touched by the previous call.
        copies = max(2, min(args.max_copies, math.ceil(3 * l2 / (hidden * vocab)) + 1))
    else:
        copies = 1
    weights = [random_bf16(vocab, hidden, device, args.seed + i) for i in range(copies)]
    fp8 = [quantize(w) for w in weights]  # (w_fp8 [vocab, hidden] contiguous, scale [1])
    rows = []
    for batch in args.batches:
        gen = torch.Generator(device=device).manual_seed(args.seed + 1000 + batch)
        xs = [
            torch.randn(batch, hidden, generator=gen, device=device).to(torch.bfloat16)
            for _ in range(copies)
        ]
        xqs = [quantize_activation(x) for x in xs]
        # vLLM's torch FP8 kernel pads the activation to 17 rows when not compiling; plain
        # _scaled_mm takes any row count on current torch. Use the plain call unless it refuses.
        pad_rows = None
        try:
            scaled_mm(xqs[0][0], fp8[0][0][:256].t(), xqs[0][1], fp8[0][1])
        except RuntimeError as exc:
            pad_rows = 17
            print(
                f"  _scaled_mm refused {batch} rows ({exc}); padding the activation to 17 rows as vLLM does"
            )
        if pad_rows:
            xqs = [
                (
                    F.pad(xq.view(torch.uint8), (0, 0, 0, pad_rows - batch)).view(
                        torch.float8_e4m3fn
                    ),
                    sx,
                )
                for xq, sx in xqs
            ]

        def bf16_fn(i):
            return lambda: F.linear(xs[i], weights[i])

        def gemm_fn(i):
            return lambda: scaled_mm(xqs[i][0], fp8[i][0].t(), xqs[i][1], fp8[i][1])

        def head_fn(i):
            def run():
                xq, sx = quantize_activation(xs[i])
                if pad_rows:
                    xq = F.pad(xq.view(torch.uint8), (0, 0, 0, pad_rows - batch)).view(
                        torch.float8_e4m3fn
                    )
                return scaled_mm(xq, fp8[i][0].t(), sx, fp8[i][1])[:batch]

            return run

        # Sanity: the FP8 head is close to the BF16 head (never time garbage).
        ref = F.linear(xs[0], weights[0]).float()
        if cuda:
            got = head_fn(0)().float()
        else:
            cols = min(vocab, args.cpu_fp8_slice)
            xq, sx = xqs[0]
            got = scaled_mm(xq, fp8[0][0][:cols].t(), sx, fp8[0][1])[:batch].float()
            ref = ref[:, :cols]
        rel_err = float((got - ref).norm() / ref.norm())

        row = {
            "hidden": hidden,
            "vocab": vocab,
            "batch": batch,
            "weight_copies_rotated": copies,
            "activation_rows_padded_to": pad_rows,
            "fp8_vs_bf16_relative_error": rel_err,
        }
        bytes_bf16 = vocab * hidden * 2 + batch * hidden * 2 + batch * vocab * 2
        bytes_fp8 = vocab * hidden * 1 + batch * hidden * 1 + batch * vocab * 2 + 8
        row["bytes_bf16"] = bytes_bf16
        row["bytes_fp8"] = bytes_fp8
        row["floor_bf16_s"] = bytes_bf16 / bandwidth
        row["floor_fp8_s"] = bytes_fp8 / bandwidth
        if cuda:
            row["bf16_s"] = time_cuda_events(
                [bf16_fn(i) for i in range(copies)], args.reps, args.warmup
            )
            row["fp8_gemm_s"] = time_cuda_events(
                [gemm_fn(i) for i in range(copies)], args.reps, args.warmup
            )
            row["fp8_head_s"] = time_cuda_events(
                [head_fn(i) for i in range(copies)], args.reps, args.warmup
            )
            try:
                row["bf16_graph_s"] = time_cuda_graphs(
                    [bf16_fn(i) for i in range(copies)], args.reps, args.warmup
                )
                row["fp8_gemm_graph_s"] = time_cuda_graphs(
                    [gemm_fn(i) for i in range(copies)], args.reps, args.warmup
                )
                row["fp8_head_graph_s"] = time_cuda_graphs(
                    [head_fn(i) for i in range(copies)], args.reps, args.warmup
                )
            except Exception as exc:  # keep the eager numbers if capture fails
                row["graph_error"] = repr(exc)
            row["method"] = f"CUDA events, median of {args.reps} after {args.warmup} warm-up calls"
        else:
            row["bf16_s"] = time_cpu(bf16_fn(0), args.cpu_reps, 1)
            cols = min(vocab, args.cpu_fp8_slice)
            w_slice = fp8[0][0][:cols]  # contiguous rows: .t() is column-major [hidden, cols]
            xq, sx = xqs[0]
            slice_s = time_cpu(
                lambda: scaled_mm(xq, w_slice.t(), sx, fp8[0][1]), args.cpu_fp8_reps, 1
            )
            quant_s = time_cpu(lambda: quantize_activation(xs[0]), args.cpu_reps, 1)
            row["fp8_gemm_s"] = slice_s * vocab / cols
            row["fp8_head_s"] = row["fp8_gemm_s"] + quant_s
            # What the same call costs through torch's other CPU path (oneDNN off: FP8 -> float32,
            # then a float32 matmul), for context: vLLM runs the dispatch torch picks, above.
            with torch.backends.mkldnn.flags(enabled=False):
                row["fp8_gemm_onednn_off_s"] = (
                    time_cpu(
                        lambda: scaled_mm(xq, w_slice.t(), sx, fp8[0][1]), args.cpu_fp8_reps, 1
                    )
                    * vocab
                    / cols
                )
            row["cpu_scaled_mm_dispatch"] = _cpu_scaled_mm_dispatch()
            row["fp8_slice_vocab"] = cols
            row["fp8_slice_gemm_s"] = slice_s
            row["activation_quant_s"] = quant_s
            row["method"] = (
                f"perf_counter; BF16 median of {args.cpu_reps}; FP8 GEMM median of {args.cpu_fp8_reps} on a "
                f"{cols}-row vocab slice, scaled x{vocab / cols:g} to the full vocab"
            )
        row["speedup_gemm"] = row["bf16_s"] / row["fp8_gemm_s"]
        row["speedup_head"] = row["bf16_s"] / row["fp8_head_s"]
        row["fp8_over_bf16_time_head"] = row["fp8_head_s"] / row["bf16_s"]
        if "bf16_graph_s" in row:
            row["speedup_gemm_graph"] = row["bf16_graph_s"] / row["fp8_gemm_graph_s"]
            row["speedup_head_graph"] = row["bf16_graph_s"] / row["fp8_head_graph_s"]
        rows.append(row)
        print(_row_line(row), flush=True)
    # One full-size FP8 call on CPU, to check the slice extrapolation.
    if not cuda and args.cpu_full_check and hidden == min(h for h, _ in args.shapes):
        x = torch.randn(1, hidden, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
        xq, sx = quantize_activation(x)
        t0 = time.perf_counter()
        scaled_mm(xq, fp8[0][0].t(), sx, fp8[0][1])
        full = time.perf_counter() - t0
        first = next(r for r in rows if r["batch"] == 1) if 1 in args.batches else rows[0]
        first["cpu_full_size_fp8_gemm_s_single_call"] = full
        print(
            f"  CPU check: one full-size FP8 GEMM (batch 1) took {full:.2f} s; extrapolated "
            f"{first['fp8_gemm_s']:.2f} s",
            flush=True,
        )
    del weights, fp8
    return rows


def _cpu_scaled_mm_dispatch() -> str:
    """Which CPU implementation torch's ``_scaled_mm`` takes (aten/native/Blas.cpp): oneDNN's
    ``mkldnn_scaled_mm`` when oneDNN is enabled and the CPU has AMX-INT8, else an emulation that
    widens both operands to float32 and runs a float32 matmul."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        flags = []
    if (
        torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and "amx_int8" in flags
    ):
        return "oneDNN mkldnn_scaled_mm (AMX-INT8 CPU, no FP8 arithmetic)"
    return "float32 emulation (FP8 -> float32, float32 matmul)"


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _row_line(r: dict) -> str:
    extra = ""
    if "speedup_head_graph" in r:
        extra = f", graphs: BF16 {_fmt_s(r['bf16_graph_s'])} FP8 {_fmt_s(r['fp8_head_graph_s'])} x{r['speedup_head_graph']:.2f}"
    return (
        f"  {r['hidden']}x{r['vocab']} batch {r['batch']}: BF16 {_fmt_s(r['bf16_s'])}, FP8 gemm "
        f"{_fmt_s(r['fp8_gemm_s'])}, FP8 head {_fmt_s(r['fp8_head_s'])} (speedup x{r['speedup_head']:.3f}){extra}"
    )


def print_table(result: dict) -> None:
    cuda = result["device"]["type"] == "cuda"
    head = [
        "shape (hidden x vocab)",
        "batch",
        "BF16",
        "FP8 GEMM",
        "FP8 head",
        "BF16 floor",
        "FP8 floor",
        "MB BF16",
        "MB FP8",
        "speedup (BF16/FP8 head)",
        "FP8/BF16 time",
    ]
    if cuda:
        head += ["BF16 graph", "FP8 head graph", "speedup graph"]
    else:
        head += ["FP8 GEMM, oneDNN off"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in result["rows"]:
        cells = [
            f"{r['hidden']} x {r['vocab']}",
            str(r["batch"]),
            _fmt_s(r["bf16_s"]),
            _fmt_s(r["fp8_gemm_s"]),
            _fmt_s(r["fp8_head_s"]),
            _fmt_s(r["floor_bf16_s"]),
            _fmt_s(r["floor_fp8_s"]),
            f"{r['bytes_bf16'] / 1e6:.1f}",
            f"{r['bytes_fp8'] / 1e6:.1f}",
            f"{r['speedup_head']:.3f}x",
            f"{r['fp8_over_bf16_time_head']:.2f}",
        ]
        if cuda:
            cells += [
                _fmt_s(r["bf16_graph_s"]) if "bf16_graph_s" in r else "-",
                _fmt_s(r["fp8_head_graph_s"]) if "fp8_head_graph_s" in r else "-",
                f"{r['speedup_head_graph']:.3f}x" if "speedup_head_graph" in r else "-",
            ]
        if not cuda:
            cells.append(
                _fmt_s(r["fp8_gemm_onednn_off_s"]) if "fp8_gemm_onednn_off_s" in r else "-"
            )
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes",
        nargs="+",
        default=["1024x262144", "5376x262144"],
        help="HIDDENxVOCAB, e.g. 1024x262144",
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--reps", type=int, default=200, help="CUDA timed calls per row")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-copies", type=int, default=4)
    parser.add_argument("--cpu-reps", type=int, default=5)
    parser.add_argument("--cpu-fp8-reps", type=int, default=3)
    parser.add_argument(
        "--cpu-fp8-slice", type=int, default=2048, help="vocab rows timed for FP8 on CPU"
    )
    parser.add_argument(
        "--cpu-full-check", type=int, default=1, help="one full-size FP8 call on CPU (1/0)"
    )
    parser.add_argument(
        "--copy-bytes", type=int, default=0, help="bytes for the bandwidth copy (0: auto)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    started = time.perf_counter()

    def quantize(w):
        q = quantize_per_tensor(w)
        return q.weight, q.scale

    quantizer = "draft_head_fp8.fp8.quantize_per_tensor"
    if device.type == "cuda":
        torch.cuda.set_device(device)
        name = torch.cuda.get_device_name(device)
        props = torch.cuda.get_device_properties(device)
        dev_info = {
            "type": "cuda",
            "name": name,
            "capability": list(torch.cuda.get_device_capability(device)),
            "memory_bytes": props.total_memory,
            "l2_bytes": getattr(props, "L2_cache_size", None),
        }
        copy_bytes = args.copy_bytes or (4 << 30)
    else:
        dev_info = {
            "type": "cpu",
            "name": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
        }
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    dev_info["name"] = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        copy_bytes = args.copy_bytes or (1 << 30)
    bandwidth = copy_bandwidth(device, copy_bytes, 20 if device.type == "cuda" else 5)
    print(
        f"device {dev_info['name']} ({device.type}); copy bandwidth {bandwidth / 1e9:.1f} GB/s "
        f"(read+write, {copy_bytes >> 20} MiB copy); quantizer: {quantizer}",
        flush=True,
    )
    rows = []
    for hidden, vocab in args.shapes:
        rows.extend(bench_shape(hidden, vocab, args, device, quantize, bandwidth))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result = {
        "schema": "draft-head-fp8-bench-head-matmul/v1",
        "device": dev_info,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
        "quantizer": quantizer,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "copy_bandwidth_bytes": copy_bytes,
        "fp8_path": "quantize_activation (dynamic per-tensor) + torch._scaled_mm(x_fp8, w_fp8[vocab,hidden].t(), "
        "scale_a, scale_b, out_dtype=bf16)",
        "bf16_path": "F.linear(x_bf16, w_bf16[vocab, hidden])",
        "rows": rows,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    b1 = [r for r in rows if r["batch"] == 1 and r["hidden"] == 1024]
    if b1:
        key = "speedup_head_graph" if "speedup_head_graph" in b1[0] else "speedup_head"
        result["goal"] = {
            "batch1_1024x262144_speedup": b1[0][key],
            "speedup_key": key,
            "target": 1.8,
            "met": b1[0][key] >= 1.8,
        }
    out = args.out or ROOT / "bench" / "results" / f"head_matmul_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print_table(result)
    print(f"total {result['seconds_total']} s; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
