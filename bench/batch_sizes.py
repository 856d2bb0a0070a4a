"""The draft head in the real engine at batch 1 to 32: flag off against flag on, per batch size.

    python -m bench.batch_sizes [--pair-dir DIR] [--batches 1 2 4 8 16 32] [--max-tokens 8]
        [--mode NAME=ENV ...] [--kind native|avx2] [--out FILE]

The real-size Gemma 4 pair of ``bench.real_size`` (1024 x 262144 assistant head, a one-layer
5376-wide target). One engine per mode; in each, after a warm-up generate, one generate per batch
size (the prompts repeated to fill it, ``ignore_eos``), and the worker times every draft logits
call with the number of rows it served (``worker_probe.time_draft_head``), so each batch size
gets its own median. Modes: ``off`` (stock BF16 head) and ``on`` (the flag with its defaults);
more with ``--mode NAME=VAR=VALUE[,VAR=VALUE]`` (the flag on, plus those settings). Writes
bench/results/batch_sizes.json and prints a table of head time per call and tokens/s per batch,
each mode as a ratio to ``off`` measured in the same run. ``--kind avx2`` runs every mode as the
AVX2 kind, emulated on this CPU; a mode the flag refuses at start-up is recorded as refused.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from bench.measure import write_json
from bench.real_size import build_pair
from draft_head_fp8 import harness

ROOT = Path(__file__).resolve().parent.parent
# The machine kind every mode runs as: this CPU as it is, or the AVX2 kind emulated on it
# (vLLM's real AVX2 kernel library; docs/benchmarks.md, "Three kinds of CPU").
KINDS = {
    "native": {},
    "avx2": {
        "PYTHONPATH": str(ROOT / "tools" / "cpu_kinds" / "avx2"),
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
}
PROMPTS = ["Return a new list containing", "This module provides", "The default value is"]


def parse_mode(text: str) -> tuple[str, dict[str, str]]:
    name, _, settings = text.partition("=")
    env = dict(item.split("=", 1) for item in settings.split(",") if item)
    return name, env


def run_mode(pair, name: str, flag: bool, env: dict, args: argparse.Namespace) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix=f"dhfp8-batch-{name}-"))
    environment = {
        **harness.engine_env(scratch, flag=flag, archive=scratch / "archive"),
        **KINDS[args.kind],
        **env,
    }
    probe_args = ["--max-tokens", str(args.max_tokens), "--ignore-eos"]
    probe_args += [
        "--kv-cache-memory-bytes",
        str(1 << 30),
        "--batch-sizes",
        *map(str, args.batches),
    ]
    for prompt in PROMPTS:
        probe_args += ["--prompt", prompt]
    print(f"{name}: starting vLLM (log {scratch / 'engine.log'})", flush=True)
    run = harness.launch(
        pair.target, pair.assistant, env=environment, out=scratch / "facts.json",
        args=tuple(probe_args), log=scratch / "engine.log", timeout=3600,
        progress=lambda s: print(f"  ... {s:.0f} s", flush=True),
    )  # fmt: skip
    refusal = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    if not run.ok and refusal:  # the flag's default on a CPU without a fast FP8 head
        print(f"{name}: refused at start-up: {refusal[0]}", flush=True)
        return {"env": env, "flag": flag, "refused": refusal[0], "by_batch": None}
    if not run.ok:
        raise SystemExit(f"{name}: the engine failed (exit {run.returncode}):\n{run.tail(30)}")
    facts = run.facts
    timing = facts["draft_head_timing"]["by_rows"]
    sweep = {s["batch"]: s for s in facts["batch_sweep"]}
    return {
        "env": env,
        "flag": flag,
        "receipt_head_kernel": facts["after_start"]["receipt"]["head_kernel"],
        "by_batch": {
            str(b): {
                "head_ms": 1e3 * timing[str(b)]["median_s"] if str(b) in timing else None,
                "head_calls": timing[str(b)]["calls"] if str(b) in timing else 0,
                "tokens_per_second": sweep[b]["generated_tokens"] / sweep[b]["seconds"],
            }
            for b in args.batches
        },
        "texts": facts["texts"],
        "peak_rss_bytes": facts["peak_rss_bytes"],
    }


def print_table(results: dict, batches: list[int]) -> None:
    off = results["off"]["by_batch"]
    for name, result in results.items():
        if result.get("refused"):
            print(f"{name}: refused at start-up ({result['refused']})")
    names = [n for n, r in results.items() if n != "off" and not r.get("refused")]
    print("| batch | off: head ms | " + " | ".join(f"{n}: head ms (x off)" for n in names) + " | "
          + " | ".join(f"{n}: tok/s (x off)" for n in names) + " |")  # fmt: skip
    print("|---:" * (2 + 2 * len(names)) + "|")
    for b in map(str, batches):
        cells = [b, f"{off[b]['head_ms']:.1f}"]
        for n in names:
            on = results[n]["by_batch"][b]
            cells.append(f"{on['head_ms']:.1f} ({on['head_ms'] / off[b]['head_ms']:.2f})")
        for n in names:
            on = results[n]["by_batch"][b]
            ratio = on["tokens_per_second"] / off[b]["tokens_per_second"]
            cells.append(f"{on['tokens_per_second']:.1f} ({ratio:.2f})")
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair-dir", type=Path, default=Path(tempfile.gettempdir()) / "dhfp8-real")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--mode", action="append", default=[], metavar="NAME=VAR=VALUE")
    parser.add_argument("--kind", choices=sorted(KINDS), default="native")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "batch_sizes.json")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pair = build_pair(args.pair_dir)
    modes = {"off": (False, {}), "on": (True, {})}
    modes.update({name: (True, env) for name, env in map(parse_mode, args.mode)})
    results = {name: run_mode(pair, name, flag, env, args) for name, (flag, env) in modes.items()}
    result = {
        "schema": "draft-head-fp8-bench-batch-sizes/v1",
        "machine": {"processor": platform.processor() or platform.machine(), "kind": args.kind},
        "batches": args.batches,
        "max_tokens": args.max_tokens,
        "modes": results,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    write_json(args.out, result)
    print_table(results, args.batches)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
