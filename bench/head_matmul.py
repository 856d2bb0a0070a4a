"""The draft head's apply, BF16 against FP8 as the plugin serves it, with and without the exact
top-k pick, per batch size, on whatever device is here.

    python -m bench.head_matmul [--shapes 1024x262144 64x2048] [--batches 1 2 4 8] [--k 8]

Rows (each timed on the same weights and activations, interleaved within one run):
- ``bf16``: ``F.linear`` with a BF16 result; on a CPU also ``bf16_vllm``, the GEMM vLLM's
  unquantized head dispatches to on this CPU (``dispatch_cpu_unquantized_gemm``: oneDNN or
  sgl's packed kernel), when vLLM imports;
- ``fp8_scaled_mm``: vLLM's ``PerTensorTorchFP8ScaledMMLinearKernel`` path: activations quantized
  per tensor, ``torch._scaled_mm`` on the ``[hidden, vocab]`` weight (the CUDA path; on a CPU a
  slow reference, timed on a vocab slice and scaled to the whole vocabulary);
- ``fp8_w8a16`` (CPU, vLLM's op): ``fp8_scaled_mm_cpu`` on a ``convert_weight_packed`` weight,
  activations BF16, what the plugin serves on a CPU;
- ``+pick``: the same plus ``rescore_top_k`` (the FP8 top-k rescored from the BF16 rows), and
  ``pick`` alone: what exact draft tokens cost on top of the FP8 scan;
- ``+certified`` (CUDA): the same scan plus ``certified_pick`` (k = 8, wide_k = 64) as the
  plugin runs it where a graph is captured: no host sync, stage b always (docs/certificate.md);
  its graph row proves it captures. ``certified stages`` in the JSON: the rows each stage decided.

Needs torch; the package for the quantizer and the pick (``PYTHONPATH=src`` where it is not
installed); vLLM only for the CPU rows that are vLLM's. CUDA: CUDA events, median of ``--reps``
after warm-up, weights rotated over enough copies that no call reuses L2, and each row replayed
from a CUDA graph too. CPU: ``perf_counter`` medians. The floor is bytes / the copy bandwidth
measured in the same run. Writes bench/results/head_matmul_<device>.json and prints a table.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.heads import quantize_activation, scaled_mm
from bench.measure import write_json
from draft_head_fp8.certificate import (
    KERNEL_SCALED_MM,
    certified_pick,
    count_record,
    logit_bound,
    row_error_norms,
)
from draft_head_fp8.fp8 import quantize_per_tensor
from draft_head_fp8.rescore import rescore_top_k

ROOT = Path(__file__).resolve().parent.parent


def random_bf16(rows: int, cols: int, device: torch.device, seed: int) -> torch.Tensor:
    """N(0, 0.02) BF16 weights, built in pieces (no float32 copy of the whole head)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    w = torch.empty(rows, cols, dtype=torch.bfloat16, device=device)
    step = max(1, (64 << 20) // (4 * cols))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        w[start : start + n] = (
            torch.randn(n, cols, generator=gen, device=device) * 0.02
        ).bfloat16()
    return w


def time_cuda(fns: list, reps: int, warmup: int) -> float:
    """Median seconds per call over CUDA events; ``fns`` rotated (different weight copies)."""
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for i, (start, end) in enumerate(events):
        start.record()
        fns[i % len(fns)]()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3


def time_cuda_graphs(fns: list, reps: int, warmup: int) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:  # warm up outside capture (cuBLAS workspace, ...)
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graphs = []
    for fn in fns:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graphs.append(graph)
    return time_cuda([g.replay for g in graphs], reps, warmup)


def time_cpu(fn, reps: int) -> float:
    fn()  # warm up: lazy initialisation is not the call's cost
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    """(read + write) bytes per second of a large tensor copy on this device."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    seconds = time_cuda([copy], reps, 3) if device.type == "cuda" else time_cpu(copy, reps)
    return 2 * nbytes / seconds


def vllm_cpu_heads(w: torch.Tensor, q) -> dict:
    """vLLM's own CPU paths for this head: the BF16 GEMM its unquantized head dispatches to,
    and the W8A16 op on the packed weight. Empty without vLLM or its op."""
    try:
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        from draft_head_fp8.vllm_plugin import seams
        from draft_head_fp8.vllm_plugin.kernels import packed_w8a16
    except Exception:
        return {}
    heads = {}
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w, requires_grad=False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    heads["bf16_vllm"] = lambda x: layer.cpu_linear(x, layer.weight, None)
    if seams.read("cpu_fp8_w8a16_supported"):  # wherever the installed vLLM keeps it
        heads["fp8_w8a16"] = packed_w8a16(q.weight, q.scale)  # the plugin's own call
    return heads


def bench_shape(hidden: int, vocab: int, args, device: torch.device, bandwidth: float) -> list:
    cuda = device.type == "cuda"
    copies = 1
    if cuda:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
        copies = max(2, min(args.max_copies, math.ceil(3 * l2 / (hidden * vocab)) + 1))
    weights = [random_bf16(vocab, hidden, device, args.seed + i) for i in range(copies)]
    fp8 = [quantize_per_tensor(w) for w in weights]
    extra = {} if cuda else vllm_cpu_heads(weights[0], fp8[0])
    bounds = None
    if cuda:  # the certificate's per-row bound, made once per head as the plugin does at load
        bounds = [
            logit_bound(
                row_error_norms(w, q, kernel=KERNEL_SCALED_MM),
                hidden=hidden,
                kernel=KERNEL_SCALED_MM,
            )
            for w, q in zip(weights, fp8)
        ]
    rows = []
    for batch in args.batches:
        gen = torch.Generator(device=device).manual_seed(args.seed + 1000 + batch)
        xs = [torch.randn(batch, hidden, generator=gen, device=device).bfloat16() for _ in fp8]
        heads = head_calls(xs, weights, fp8, extra, k=args.k, cuda=cuda, bounds=bounds)

        row = {"hidden": hidden, "vocab": vocab, "batch": batch, "k": args.k, "copies": copies}
        row["bytes_bf16"] = vocab * hidden * 2 + batch * (hidden + vocab) * 2
        row["bytes_fp8"] = vocab * hidden + batch * (hidden + vocab) * 2 + 4
        row["bytes_pick"] = batch * args.k * hidden * 2
        row["floor_bf16_s"] = row["bytes_bf16"] / bandwidth
        row["floor_fp8_s"] = row["bytes_fp8"] / bandwidth
        reference = F.linear(xs[0], weights[0]).float()
        times, errors = {}, {}
        for name, head in heads.items():
            if name == "certified counts":
                continue
            if name == "fp8_scaled_mm" and not cuda:
                times[name], errors[name] = _cpu_scaled_mm(xs[0], fp8[0], reference, args)
                continue
            if cuda:
                fns = [lambda i=i, head=head: head(i) for i in range(copies)]
                times[name] = time_cuda(fns, args.reps, args.warmup)
                try:
                    times[name + " (graph)"] = time_cuda_graphs(fns, args.reps, args.warmup)
                except Exception as exc:  # keep the eager figure when capture fails
                    row[f"graph_error_{name}"] = repr(exc)
            else:
                times[name] = time_cpu(lambda head=head: head(0), args.cpu_reps)
            if name != "pick":
                got = head(0).float()
                errors[name] = float((got - reference).norm() / reference.norm())
            if name.endswith("+certified"):
                row["certified stages"] = count_record(heads["certified counts"](0))
                row["certified argmax equals bf16"] = bool(
                    torch.equal(head(0).argmax(-1), reference.argmax(-1))
                )
        row["seconds"] = times
        row["relative_error_vs_bf16"] = errors
        base = times.get("bf16_vllm", times["bf16"])
        row["bf16_baseline"] = "bf16_vllm" if "bf16_vllm" in times else "bf16"
        row["time_over_bf16"] = {name: t / base for name, t in times.items()}
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def head_calls(
    xs: list, weights: list, fp8: list, extra: dict, *, k: int, cuda: bool, bounds=None
) -> dict:
    """name -> call(i): each head on copy i of the weights and activations (``certified
    counts`` is not a head: it is the certified call's stage counts, read by the caller)."""
    vocab = weights[0].shape[0]

    def pick(logits, i):
        return rescore_top_k(logits, xs[i], weights[i], k=k, valid_rows=vocab)

    def certified(logits, i):
        return certified_pick(
            logits,
            xs[i],
            weights[i],
            k=k,
            wide_k=64,
            valid_rows=vocab,
            bound=bounds[i],
            host_sync=False,
        )

    heads = {
        "bf16": lambda i: F.linear(xs[i], weights[i]),
        "fp8_scaled_mm": lambda i: _scaled_mm_head(xs[i], fp8[i]),
    }
    if cuda:
        heads["fp8_scaled_mm+pick"] = lambda i: pick(_scaled_mm_head(xs[i], fp8[i]), i)
        if bounds is not None:
            heads["fp8_scaled_mm+certified"] = lambda i: (
                certified(_scaled_mm_head(xs[i], fp8[i]), i).logits
            )
    for name, head in extra.items():
        heads[name] = lambda i, head=head: head(xs[i])
    if "fp8_w8a16" in extra:
        heads["fp8_w8a16+pick"] = lambda i: pick(extra["fp8_w8a16"](xs[i]), i)
    scanned = F.linear(xs[0], weights[0])
    heads["pick"] = lambda i: pick(scanned.clone(), 0)  # the pick alone, on a fresh copy
    if cuda and bounds is not None:
        heads["certified counts"] = lambda i: certified(_scaled_mm_head(xs[i], fp8[i]), i).counts
    return heads


def _scaled_mm_head(x: torch.Tensor, q) -> torch.Tensor:
    xq, sx = quantize_activation(x)
    return scaled_mm(xq, q.weight.t(), sx, q.scale)


def _cpu_scaled_mm(x, q, reference, args) -> tuple[float, float]:
    """torch._scaled_mm has no fast CPU path (~20 s at 1 x 1024 x 262144): time a vocab slice
    and scale it to the whole vocabulary; the activation quantization is timed whole."""
    cols = min(q.weight.shape[0], args.cpu_scaled_mm_slice)
    xq, sx = quantize_activation(x)
    gemm = time_cpu(lambda: scaled_mm(xq, q.weight[:cols].t(), sx, q.scale), args.cpu_reps)
    quant = time_cpu(lambda: quantize_activation(x), args.cpu_reps)
    got = scaled_mm(xq, q.weight[:cols].t(), sx, q.scale).float()
    error = float((got - reference[:, :cols]).norm() / reference[:, :cols].norm())
    return gemm * q.weight.shape[0] / cols + quant, error


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _line(row: dict) -> str:
    cells = ", ".join(
        f"{name} {_fmt(t)} ({row['time_over_bf16'][name]:.2f}x)"
        for name, t in row["seconds"].items()
    )
    return f"  {row['hidden']}x{row['vocab']} batch {row['batch']}: {cells}"


def print_table(result: dict) -> None:
    names = list(dict.fromkeys(n for r in result["rows"] for n in r["seconds"]))
    head = ["hidden x vocab", "batch", *names, "BF16 floor", "FP8 floor"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in result["rows"]:
        cells = [f"{r['hidden']} x {r['vocab']}", str(r["batch"])]
        for name in names:
            t = r["seconds"].get(name)
            cells.append("-" if t is None else f"{_fmt(t)} ({r['time_over_bf16'][name]:.2f}x)")
        cells += [_fmt(r["floor_bf16_s"]), _fmt(r["floor_fp8_s"])]
        print("| " + " | ".join(cells) + " |")
    baseline = result["rows"][0]["bf16_baseline"] if result["rows"] else "bf16"
    print(f"(x: time over {baseline}, the BF16 head as vLLM runs it here)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["1024x262144", "64x2048"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--k", type=int, default=8, help="candidates the pick rescores")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--reps", type=int, default=200, help="CUDA timed calls per row")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-copies", type=int, default=4)
    parser.add_argument("--cpu-reps", type=int, default=7)
    parser.add_argument("--cpu-scaled-mm-slice", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    started = time.perf_counter()
    if device.type == "cuda":
        if device.index is None:  # "cuda" alone: the current device, named by its index
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        info = {"type": "cuda", "name": torch.cuda.get_device_name(device)}
        bandwidth = copy_bandwidth(device, 4 << 30, 50)
    else:
        info = {"type": "cpu", "name": platform.processor() or platform.machine()}
        info["threads"] = torch.get_num_threads()
        info["amx"] = bool(torch.cpu._is_amx_tile_supported())
        bandwidth = copy_bandwidth(device, 1 << 30, 5)
    print(f"{info['name']}: copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write)", flush=True)
    rows = []
    for hidden, vocab in shapes:
        rows += bench_shape(hidden, vocab, args, device, bandwidth)
    result = {
        "schema": "draft-head-fp8-bench-head-matmul/v2",
        "device": info,
        "torch": torch.__version__,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "rows": rows,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    out = args.out or ROOT / "bench" / "results" / f"head_matmul_{device.type}.json"
    write_json(out, result)
    print_table(result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
