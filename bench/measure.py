"""What the benchmark scripts share: interleaved medians, peak extra resident memory measured in
a fresh child process, and JSON results written whole.

Peak memory: tracemalloc does not see torch's allocations. Before each operation the child resets
the kernel's resident high-water mark (writing ``5`` to ``/proc/self/clear_refs``), so afterwards
``VmHWM - VmRSS(before)`` is the most the operation ever held on top of what was there. The child
runs with ``MALLOC_MMAP_THRESHOLD_=65536`` so that every block of 64 KiB or more is its own mmap,
unmapped on free: a temporary buffer cannot hide in heap pages an earlier free left resident.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{key}:\s+(\d+) kB", f.read()).group(1)) * 1024


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_extra(operations: dict[str, Callable[[], Any]]) -> dict[str, int]:
    """In this process (call it from the child): extra resident bytes at peak, per operation."""
    out = {}
    for name, op in operations.items():
        op()  # warm up: lazy initialisation is not the operation's cost
        reset_peak()
        before = status_bytes("VmRSS")
        op()
        out[name] = status_bytes("VmHWM") - before
    return out


def run_memory_child(module: str, *args: str) -> dict[str, int]:
    """Run ``python -m module --memory-child ...`` from the repository root; it must print
    peak_extra()'s dict as its last line."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", module, "--memory-child", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved_medians(
    operations: dict[str, Callable[[], Any]], runs: int, max_runs: dict[str, int] | None = None
) -> dict[str, dict]:
    """Time each operation ``runs`` times, interleaved, so machine noise hits all of them alike."""
    max_runs = max_runs or {}
    for op in operations.values():
        op()
    samples: dict[str, list[float]] = {name: [] for name in operations}
    for i in range(runs):
        for name, op in operations.items():
            if i >= max_runs.get(name, runs):
                continue
            start = time.perf_counter()
            op()
            samples[name].append(time.perf_counter() - start)
    return {
        name: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "runs": len(s)}
        for name, s in samples.items()
    }


def environment() -> dict:
    import platform

    import torch

    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def write_json(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)  # a results file of our own: replacing it is the point
