"""What the engine tests share on top of ``draft_head_fp8.harness``: the test's own isolation
(caches, temp files, HOME and state folders inside the test's tmp folder) and small helpers."""

from __future__ import annotations

import socket
from pathlib import Path

from draft_head_fp8 import harness

STOCK_MTP = "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"


def engine_env(
    tmp: Path,
    *,
    flag: bool,
    archive: Path | None = None,
    plugins: bool = True,
    multiprocess: bool = False,
) -> dict:
    return harness.engine_env(
        tmp, flag=flag, archive=archive, plugins=plugins, multiprocess=multiprocess,
        isolate_home=True,
    )  # fmt: skip


def run_engine(tmp: Path, pair, env: dict, *extra: str, timeout: int = 600) -> harness.Launch:
    return harness.launch(
        pair.target, pair.assistant, env=env, out=tmp / "facts.json", args=extra, cwd=tmp,
        timeout=timeout,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []
