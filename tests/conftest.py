"""Fixtures shared between test modules. Engine runs above all: each real engine start costs
10-30 s on 2 cores, so the shipped pair's flag-off and flag-on runs are made once per session,
by the README's own demo command, and read by every test that compares against them.

The suite runs in lanes (pytest-xdist, ``make test``: one per core, up to ``TEST_LANES``). A
lane takes whole groups (``pytest_collection_modifyitems``): a module, or one parameter of a
module's engine runs where the module names it (``LANES_BY``), so that every module- or
parameter-scoped engine run is made once; groups that start engines go first, so the short unit
tests fill the lanes' ends. The demo's runs are made once for all lanes (``shared_once``)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import (
    FP8_EVERYWHERE,
    cpu_kind_line,
    engine_record,
    shared_once,
    shell,
    warm_user_cache,
)

from draft_head_fp8.archive import Archive
from draft_head_fp8.tiny import TinyPair, build_tiny_pair, shipped_pair


def pytest_report_header(config):
    record = engine_record()
    if record is None:
        engine = "vLLM 0.34 engine: not composed (run `make releases`); its engine tests will fail"
    else:
        engine = f"vLLM 0.34 engine: kernels from {record['kernels']['built_from']}"
        if record["cannot_show"]:
            engine += f"; they cannot show {record['cannot_show']}"
    return [cpu_kind_line(), engine]


def _lane_group(item: pytest.Item) -> str:
    group = item.module.__name__
    by = getattr(item.module, "LANES_BY", None)
    callspec = getattr(item, "callspec", None)
    if by and callspec is not None and by in callspec.params:
        group += f"[{callspec.params[by]!r}]"
    return group


def pytest_collection_modifyitems(config, items):
    groups = {id(item): _lane_group(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    # Engine groups first (stable: pytest's own order within each, which keeps a parameter's
    # tests together), so that no lane starts a long engine group while the other idles.
    items.sort(key=lambda item: item.get_closest_marker("engine") is None)


@pytest.fixture(scope="session")
def shipped():
    return shipped_pair()


# The demo family's tiny random pairs the CLI and engine tests share, by kind: a safe one, and one
# for each refusal the flag makes.
PAIR_KINDS = {
    "dense": {},
    "ordered": {"ordered_embeddings": True, "seed": 2},
    "untied": {"untied": True, "seed": 3},
}


class TinyPairs(Mapping[str, TinyPair]):
    """The pairs of ``PAIR_KINDS``, each built the first time a test asks for it (a few seconds
    apiece), then kept for the session."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built: dict[str, TinyPair] = {}

    def __getitem__(self, kind: str) -> TinyPair:
        if kind not in self._built:
            self._built[kind] = build_tiny_pair(self._root / kind, **PAIR_KINDS[kind])
        return self._built[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(PAIR_KINDS)

    def __len__(self) -> int:
        return len(PAIR_KINDS)


@pytest.fixture(scope="session")
def pairs(tmp_path_factory):
    return TinyPairs(tmp_path_factory.mktemp("pairs"))


def isolated_env(tmp: Path, **extra: str) -> dict:
    """A user's shell with nothing of ours set, HOME and the XDG folders inside ``tmp``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env.update(
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_CACHE_HOME=str(tmp / "xdg-cache"),
        HOME=str(tmp / "home"),
        TMPDIR=str(tmp),
        **extra,
    )
    return env


@dataclass
class Demo:
    """`draft-head-fp8 demo --json` run once, as a user would: its output and its facts."""

    tmp: Path
    proc: subprocess.CompletedProcess
    env: dict

    @property
    def facts(self) -> dict:
        assert self.proc.returncode == 0, self.proc.stdout[-3000:] + self.proc.stderr[-3000:]
        return json.loads((self.tmp / "demo.json").read_text())


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    def run(tmp: Path) -> dict:
        env = isolated_env(tmp)
        warm_user_cache(Path(env["XDG_CACHE_HOME"]))
        command = f"draft-head-fp8 demo --cache {tmp / 'cache'} --json {tmp / 'demo.json'}"
        proc = shell(command, cwd=tmp, env=env)
        return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    tmp, done = shared_once(tmp_path_factory, "demo", run)
    proc = subprocess.CompletedProcess(["draft-head-fp8", "demo"], **done)
    return Demo(tmp, proc, isolated_env(tmp))


@dataclass
class DemoRun:
    """One of the demo's two engine runs, read the way the engine tests read their own."""

    facts: dict
    archive: Path | None


@pytest.fixture(scope="session")
def tp1_off(demo):
    return DemoRun(demo.facts["flag_off"], None)


@pytest.fixture(scope="session")
def tp1_on(demo):
    # The demo's flag-on run serves the FP8 head at every batch (what the tests prove).
    assert [list(i) for i in FP8_EVERYWHERE.items()][0] in demo.facts["options"]["flag_on_env"]
    return DemoRun(demo.facts["flag_on"], Path(demo.facts["archive"]["root"]))


@pytest.fixture
def quiet_env(monkeypatch):
    # boot.json records VLLM_* / DRAFT_HEAD_FP8_* variables; keep the test boots small and stable.
    for name in list(os.environ):
        if name.startswith(("VLLM_", "DRAFT_HEAD_FP8_")) or name == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(name)


@pytest.fixture
def arc(tmp_path):
    return Archive(tmp_path / "archive")
