"""What the certified exact pick (``draft_head_fp8.certificate``) costs beside the FP8 scan, and
how often each of its stages decides a draft row.

    python -m bench.certificate [--batches 1 2 4 8] [--shapes NAME ...] [--ratios 1 100]
        [--rows 32] [--threads 1] [--out FILE]

(1) Cost, per batch size, at 1024 x 262144 and 4096 x 128256 (hidden x vocab; N(0, 0.02) BF16
heads, ``bench.head_matmul``'s): the FP8 scan is vLLM's CPU W8A16 op on the packed weight (the
plugin's own call, ``kernels.packed_w8a16``; the float32 emulation where the op is missing, said
in the JSON); then the plain exact pick (``rescore_top_k``, k = 8) against the certified one
(``certified_pick``, k = 8, wide_k = 64): eager (the host may read the device: stage b only when
a row needs it) and with no host sync (stage b always). Each pick is timed alone on a fresh copy
of the scan's logits, interleaved with the others and the scan itself (``measure``'s medians), on
peaked hidden states (a confident draft, ``fidelity.synthetic_hidden_states``); the figure is the
certificate's added time as a fraction of the scan's, within one run. Stage c (every row of the
head, exactly) is timed on one row.

(2) Counts: the rows each stage decides, with no host sync (rows stage c would serve are the
uncertified ones), on ``fidelity_families``' synthetic heads of the published shapes (bulk rows
N(0, logit_std / sqrt(hidden)), 32 outlier rows scaled by each ``--ratios``, excluded from the
pick as suppressed tokens, as the fidelity sweep measures over the bulk), gaussian and peaked
hidden states, both FP8 kernels (W8A16: vLLM's op; ``_scaled_mm``: emulated in float32 with
vLLM's per-call activation quantization, 8 rows a call); and on a near-duplicate-cluster head
(24 copies of one row times 1 + 1e-2 noise, hidden states leaning toward it). Certified picks
are checked against the argmax of ``F.linear`` in BF16 (vLLM's unquantized head).

Writes bench/results/certificate.json and prints the tables.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench import heads
from bench.fidelity import synthetic_hidden_states
from bench.fidelity_families import SHAPES, emulated_w8a8, synthetic_head
from bench.head_matmul import random_bf16
from bench.measure import environment, interleaved_medians, write_json
from draft_head_fp8.certificate import (
    COUNT_NAMES,
    KERNEL_SCALED_MM,
    KERNEL_W8A16,
    certified_pick,
    every_row,
    logit_bound,
    row_error_norms,
)
from draft_head_fp8.fp8 import quantize_per_tensor
from draft_head_fp8.rescore import rescore_top_k

ROOT = Path(__file__).resolve().parent.parent
TIMED = ((1024, 262144), (4096, 128256))  # hidden x vocab
K, WIDE_K, CALL_ROWS = 8, 64, 8


def w8a16_scan(q) -> tuple:
    """(x -> FP8 logits, what it is): vLLM's op where this machine has it."""
    try:
        import vllm._custom_ops  # noqa: F401  registers torch.ops._C

        from draft_head_fp8.vllm_plugin.kernels import packed_w8a16

        if hasattr(torch.ops._C, "fp8_scaled_mm_cpu"):
            return packed_w8a16(q.weight, q.scale), "vLLM fp8_scaled_mm_cpu (packed)"
    except Exception:
        pass
    return (lambda x: heads.fp8_w8a16(x, q.weight, q.scale)), "float32 emulation (no op here)"


def peaked(w: torch.Tensor, rows: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    keep = torch.ones(w.shape[0], dtype=torch.bool)
    return synthetic_hidden_states(w, keep, rows, 4.0, gen)[0]["peaked"]


# ------------------------------------------------------------------------------------------
# (1) cost
# ------------------------------------------------------------------------------------------


def time_shape(hidden: int, vocab: int, args) -> list[dict]:
    w = random_bf16(vocab, hidden, torch.device("cpu"), args.seed)
    q = quantize_per_tensor(w)
    started = time.perf_counter()
    errors = row_error_norms(w, q)
    norms_s = time.perf_counter() - started
    bound = logit_bound(errors, hidden=hidden, kernel=KERNEL_W8A16)
    scan, scan_name = w8a16_scan(q)
    out = []
    for batch in args.batches:
        x = peaked(w, batch, args.seed + batch)
        logits = scan(x)

        def plain(f=logits, x=x):
            return rescore_top_k(f.clone(), x, w, k=K, valid_rows=vocab)

        def certified(f=logits, x=x, sync=True):
            return certified_pick(
                f.clone(), x, w, k=K, wide_k=WIDE_K, valid_rows=vocab, bound=bound, host_sync=sync
            )

        ops = {
            "fp8 scan": lambda x=x: scan(x),
            "copy": lambda f=logits: f.clone(),
            "rescore_top_k": plain,
            "certified": certified,
            "certified, no host sync": lambda: certified(sync=False),
        }
        medians = interleaved_medians(ops, args.reps)
        seconds = {name: m["median_s"] for name, m in medians.items()}
        counts = certified().counts.tolist()
        scan_s = seconds["fp8 scan"]
        row = {
            "hidden": hidden,
            "vocab": vocab,
            "batch": batch,
            "scan": scan_name,
            "seconds": seconds,
            "counts_eager": dict(zip(COUNT_NAMES, counts)),
            "certificate_added_over_scan": (seconds["certified"] - seconds["rescore_top_k"])
            / scan_s,
            "no_sync_added_over_scan": (
                seconds["certified, no host sync"] - seconds["rescore_top_k"]
            )
            / scan_s,
            "plain_pick_over_scan": (seconds["rescore_top_k"] - seconds["copy"]) / scan_s,
            "row_error_norms_s": norms_s,
        }
        out.append(row)
        print(_cost_line(row), flush=True)
    blocked = torch.zeros(vocab, dtype=torch.bool)
    x = peaked(w, 1, args.seed)
    started = time.perf_counter()
    every_row(w, x, blocked, torch.bfloat16)
    for row in out:
        row["stage_c_one_row_s"] = time.perf_counter() - started
    print(
        f"  {hidden} x {vocab}: stage c, one row, {out[0]['stage_c_one_row_s']:.3f} s", flush=True
    )
    return out


def _cost_line(row: dict) -> str:
    s = row["seconds"]
    return (
        f"  {row['hidden']} x {row['vocab']} batch {row['batch']}: scan {s['fp8 scan'] * 1e3:.2f} "
        f"ms, rescore {s['rescore_top_k'] * 1e3:.2f}, certified {s['certified'] * 1e3:.2f} "
        f"(+{row['certificate_added_over_scan']:.1%} of the scan), no sync "
        f"{s['certified, no host sync'] * 1e3:.2f} (+{row['no_sync_added_over_scan']:.1%}); "
        f"{row['counts_eager']}"
    )


# ------------------------------------------------------------------------------------------
# (2) counts
# ------------------------------------------------------------------------------------------


def count_stages(w, q, xs: torch.Tensor, suppressed, kernel: str, logits: torch.Tensor) -> dict:
    """Counts over ``xs`` in head calls of CALL_ROWS rows (``logits``: the FP8 scan's), with no
    host sync; and on how many rows the pick (stage b's where uncertified) is the argmax of
    ``F.linear`` in BF16."""
    vocab = w.shape[0]
    bound = logit_bound(row_error_norms(w, q, kernel=kernel), hidden=w.shape[1], kernel=kernel)
    totals = torch.zeros(4, dtype=torch.int64)
    agree = 0
    for start in range(0, xs.shape[0], CALL_ROWS):
        x = xs[start : start + CALL_ROWS]
        out = certified_pick(
            logits[start : start + CALL_ROWS].clone(), x, w, k=K, wide_k=WIDE_K,
            valid_rows=vocab, bound=bound, suppressed=suppressed, host_sync=False, totals=totals,
        )  # fmt: skip
        reference = F.linear(x, w)
        if suppressed is not None:
            reference[:, suppressed] = float("-inf")
        agree += int((out.logits.argmax(-1) == reference.argmax(-1)).sum())
    counts = dict(zip(COUNT_NAMES, totals.tolist()))
    counts["rows"] = int(xs.shape[0])
    counts["pick_equals_f_linear_argmax"] = agree
    return counts


def scans(q, xs: torch.Tensor) -> dict:
    """Both kernels' FP8 logits for all of ``xs`` (the W8A16 op is per row; ``_scaled_mm``'s
    activation scale is per call of CALL_ROWS rows), each weight chunk converted once."""
    w8a16, _ = w8a16_scan(q)
    return {
        KERNEL_W8A16: w8a16(xs),
        KERNEL_SCALED_MM: emulated_w8a8(xs, q.weight, q.scale, CALL_ROWS),
    }


def count_shape(name: str, vocab: int, hidden: int, ratios, args) -> dict:
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    w, outliers, keep, _ = synthetic_head(vocab, hidden, 32, 4.0, gen)
    xs, _, _ = synthetic_hidden_states(w, keep, args.rows, 4.0, gen)
    base = w[outliers].clone()
    entry = {"shape": [vocab, hidden], "family": SHAPES.get(name, (0, 0, None))[2], "sweep": []}
    for ratio in ratios:
        w[outliers] = (base.float() * ratio).to(torch.bfloat16)
        q = quantize_per_tensor(w)
        point = {"outlier_scale": ratio, "row_amax_ratio": q.row_amax_ratio}
        for kind, x in xs.items():
            for kernel, logits in scans(q, x).items():
                point[f"{kernel} {kind}"] = count_stages(w, q, x, outliers, kernel, logits)
        entry["sweep"].append(point)
        del q
    entry["seconds"] = round(time.perf_counter() - started, 1)
    print(f"  {name} {vocab} x {hidden}: {entry['seconds']} s", flush=True)
    for point in entry["sweep"]:
        print("    " + _counts_line(point), flush=True)
    return entry


def cluster_head(args) -> dict:
    """262144 x 1024, 24 near-duplicates of one row (closer than the FP8 step), hidden states
    leaning toward it: many tokens within the FP8 error of the best."""
    started = time.perf_counter()
    vocab, hidden = 262144, 1024
    gen = torch.Generator().manual_seed(args.seed)
    w, _, keep, sigma = synthetic_head(vocab, hidden, 0, 4.0, gen)
    base = int(torch.randint(0, vocab, (), generator=gen))
    copies = torch.randperm(vocab, generator=gen)[:24]
    noise = 1 + 1e-2 * torch.randn(24, hidden, generator=gen)
    w[copies] = (w[base].float() * noise).to(torch.bfloat16)
    row = w[base].float()
    x = torch.randn(args.rows, hidden, generator=gen)
    # The cluster's logit ~ 8 bulk logit standard deviations (4.0): the top of every row.
    x = (x + row / row.norm() ** 2 * 32.0).to(torch.bfloat16)
    q = quantize_per_tensor(w)
    point = {"near_duplicates": 24, "noise": 1e-2, "row_amax_ratio": q.row_amax_ratio}
    for kernel, logits in scans(q, x).items():
        point[f"{kernel} cluster"] = count_stages(w, q, x, None, kernel, logits)
    point["seconds"] = round(time.perf_counter() - started, 1)
    print("  cluster head: " + _counts_line(point), flush=True)
    return point


def _counts_line(point: dict) -> str:
    cells = []
    for key, c in point.items():
        if isinstance(c, dict):
            cells.append(f"{key}: {c['stage_a']}/{c['stage_b']}/{c['uncertified']} of {c['rows']}")
    return f"ratio {point.get('row_amax_ratio', 0):.0f}: " + "; ".join(cells)


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def print_tables(result: dict) -> None:
    print("\nCost beside the FP8 scan (medians; added time as a fraction of the scan's)")
    print(
        "| hidden x vocab | batch | FP8 scan | scan + rescore_top_k | scan + certified "
        "| certificate added | no host sync: added | stages a/b/c (eager) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in result["cost"]:
        s, c = r["seconds"], r["counts_eager"]
        print(
            f"| {r['hidden']} x {r['vocab']} | {r['batch']} | {s['fp8 scan'] * 1e3:.2f} ms | "
            f"{(s['fp8 scan'] + s['rescore_top_k'] - s['copy']) * 1e3:.2f} ms | "
            f"{(s['fp8 scan'] + s['certified'] - s['copy']) * 1e3:.2f} ms | "
            f"**{r['certificate_added_over_scan']:+.1%}** | {r['no_sync_added_over_scan']:+.1%} | "
            f"{c['stage_a']}/{c['stage_b']}/{c['stage_c']} |"
        )
    print("\nRows decided by each stage (a / b / left to c), k = 8, wide_k = 64, no host sync")
    print("| head | row amax ratio | kernel | gaussian a/b/c | peaked a/b/c |")
    print("|---|---:|---|---:|---:|")

    def cell(c):
        # ... and on how many rows the pick is F.linear's argmax (stage b's pick where uncertified)
        same = c["pick_equals_f_linear_argmax"]
        return f"{c['stage_a']}/{c['stage_b']}/{c['uncertified']} (= BF16 {same}/{c['rows']})"

    for name, entry in result["counts"].items():
        for point in entry["sweep"]:
            for kernel in (KERNEL_W8A16, KERNEL_SCALED_MM):
                g, p = point[f"{kernel} gaussian"], point[f"{kernel} peaked"]
                print(
                    f"| {name} {entry['shape'][0]} x {entry['shape'][1]} | "
                    f"{point['row_amax_ratio']:.0f} | {kernel} | {cell(g)} | {cell(p)} |"
                )
    cluster = result["cluster"]
    for kernel in (KERNEL_W8A16, KERNEL_SCALED_MM):
        c = cluster[f"{kernel} cluster"]
        print(
            f"| near-duplicate cluster 262144 x 1024 | {cluster['row_amax_ratio']:.0f} | "
            f"{kernel} | - | {cell(c)} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--ratios", type=float, nargs="+", default=[1])
    parser.add_argument(
        "--tail-ratio", type=float, default=10000, help="outlier scale of the tiny-tail head"
    )
    parser.add_argument("--rows", type=int, default=32, help="hidden states per kind and head")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "certificate.json")
    args = parser.parse_args(argv)
    if args.rows % CALL_ROWS:
        raise SystemExit(f"--rows must be a multiple of {CALL_ROWS}")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result = {
        "schema": "draft-head-fp8-bench-certificate/v1",
        "environment": environment(),
        "cpu": platform.processor() or platform.machine(),
        "k": K,
        "wide_k": WIDE_K,
        "cost": [],
        "counts": {},
    }
    if not args.skip_cost:
        print("(1) cost beside the FP8 scan", flush=True)
        for hidden, vocab in TIMED:
            result["cost"] += time_shape(hidden, vocab, args)
    print("(2) counts per stage", flush=True)
    for name in args.shapes:
        vocab, hidden, _ = SHAPES[name]
        result["counts"][name] = count_shape(name, vocab, hidden, args.ratios, args)
    # The Gemma-shaped head again, its bulk mostly FP8 subnormals under the outliers' scale.
    vocab, hidden, _ = SHAPES["gemma4-assistant"]
    tail = count_shape("gemma4-assistant", vocab, hidden, [args.tail_ratio], args)
    result["counts"]["gemma4-assistant, tiny tail"] = tail
    result["cluster"] = cluster_head(args)
    result["seconds_total"] = round(time.perf_counter() - started, 1)
    write_json(args.out, result)
    print_tables(result)
    print(f"total {result['seconds_total']} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
