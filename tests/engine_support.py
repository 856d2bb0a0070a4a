"""What the engine tests share on top of ``draft_head_fp8.harness``: the test's own isolation
(caches, temp files, HOME and state folders inside the test's tmp folder) and small helpers."""

from __future__ import annotations

import socket
from pathlib import Path

from draft_head_fp8 import harness
from draft_head_fp8.cli.compare import DEFAULT_PROMPTS

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


# The demo's prompts with long enough answers for a hundred drafts: what the engine tests serve
# on the shipped trained pair, whose drafts are accepted (random weights accept nothing, which
# would make equal spec-decode counters meaningless).
PROMPTS = DEFAULT_PROMPTS
SERVE_ARGS = (
    "--max-tokens",
    "48",
    "--draft-agreement",
    *[a for p in PROMPTS for a in ("--prompt", p)],
)


class EngineRun:
    """One finished engine process of a test, with the folders it used."""

    def __init__(self, tmp: Path, archive: Path, launch: harness.Launch) -> None:
        self.tmp, self.archive, self.launch = tmp, archive, launch

    @property
    def facts(self) -> dict:
        assert self.launch.ok, self.launch.tail(60)
        return self.launch.facts


def serve(tmp: Path, pair, *, flag: bool, env: dict | None = None, args: tuple = ()) -> EngineRun:
    archive = tmp / "archive"
    environment = {**engine_env(tmp, flag=flag, archive=archive), **(env or {})}
    return EngineRun(tmp, archive, run_engine(tmp, pair, environment, *SERVE_ARGS, *args))


def without_pointers(receipt: dict) -> dict:
    """A receipt minus tensor addresses, which differ from process to process."""
    return {
        key: {k: v for k, v in value.items() if k != "data_ptr"}
        if isinstance(value, dict)
        else value
        for key, value in receipt.items()
    }
