"""Fixtures shared between test modules. Engine runs above all: each real engine start costs
10-30 s on 2 cores, so the shipped pair's flag-off and flag-on runs are made once per session,
by the README's own demo command, and read by every test that compares against them.

The suite runs in lanes (pytest-xdist, ``make test``: one per core, up to ``TEST_LANES``). A
lane takes whole groups (``LaneScheduling``): a module, or one parameter of a module's engine runs
(``SPLIT_BY_PARAMETER``), so that every module- or parameter-scoped engine run is made once;
groups that start engines go first, so the short unit tests fill the lanes' ends. The demo's
runs are made once for all lanes (``shared_once``)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
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
from xdist.scheduler import LoadScopeScheduling

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


# Modules whose engine runs are made per parameter of a module-scoped fixture (a family and an
# engine, ...): each parameter's tests are one group, so that the lanes share such a module.
SPLIT_BY_PARAMETER = frozenset({
    "test_shared_head_families.py", "test_eagle3.py", "test_weight_updates.py",
    "test_model_runner_v2.py",
})  # fmt: skip


def lane_group(nodeid: str) -> str:
    """The group a test runs in: its module, or in a module of ``SPLIT_BY_PARAMETER`` its module
    and its parameters' id (the tests of one parameter share its module-scoped engine runs)."""
    module, _, rest = nodeid.partition("::")
    if Path(module).name in SPLIT_BY_PARAMETER and rest.endswith("]") and "[" in rest:
        return f"{module}[{rest[rest.index('[') + 1 : -1]}]"
    return module


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduling (whole groups per lane, in the order given) by ``lane_group``.
    (xdist's own ``loadgroup`` marks cannot be used: it renames node ids through an attribute
    pytest 9 no longer reads.)"""

    def _split_scope(self, nodeid: str) -> str:
        return lane_group(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return LaneScheduling(config, log)


def pytest_configure(config):
    # In lanes every temporary folder is one level deeper (popen-gwN), and a multiprocess engine's
    # IPC sockets live in its TMPDIR under the test's folder: a unix socket's path holds at most
    # 107 characters. One short root per user for the lanes' folders, emptied by pytest at the
    # start of each run as it does its own (--basetemp).
    lanes = getattr(config.option, "numprocesses", None)
    if lanes and not config.option.basetemp and "PYTEST_XDIST_WORKER" not in os.environ:
        config.option.basetemp = str(Path(tempfile.gettempdir()) / f"dhfp8-{os.getuid()}")


# The modules whose groups cost most (TP 2 and two-node runs, several engines per group), first:
# a lane that takes one of them late would finish long after the other (measured with
# --durations; the rest keep pytest's order).
HEAVIEST_FIRST = (
    "test_weight_updates.py", "test_tensor_parallel.py", "test_multinode.py",
    "test_model_runner_v2.py", "test_eagle3.py", "test_certified_pick_engine.py",
    "test_serve.py",  # three real servers, one of them TP 2: early, so no lane ends on it
)  # fmt: skip


def pytest_collection_modifyitems(config, items):
    # Engine groups first, the heaviest of them first (stable: pytest's own order within each,
    # which keeps a parameter's tests together), and the short unit tests fill the lanes' ends.
    def cost_rank(item: pytest.Item) -> tuple[bool, int]:
        name = Path(str(item.path)).name
        heavy = HEAVIEST_FIRST.index(name) if name in HEAVIEST_FIRST else len(HEAVIEST_FIRST)
        return item.get_closest_marker("engine") is None, heavy

    items.sort(key=cost_rank)


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
