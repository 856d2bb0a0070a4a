"""A launch across nodes without an engine: which ranks live on which node, each node's boot kept
and sealed by the plugin's own archive step (nodes taking turns at one shared root), and the
launch view over the nodes' roots: whole, or failing with the exact reason. The real two-node
engine runs in tests/test_multinode.py."""

from __future__ import annotations

import argparse
import json
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.launch import UnknownLaunchError, launch_view
from draft_head_fp8.cli.archive import add_archive_parser, run_archive
from draft_head_fp8.evidence import RANKS_PATH, boot_files, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.nodes import LAUNCH_RECORD, NodePlace, place, single_node
from draft_head_fp8.vllm_plugin import launch, post_share

FIXTURE = Path(__file__).parent / "fixtures" / "receipts" / "cpu-tiny-tp2-rank1-v3-post_share.json"
RANK1 = json.loads(FIXTURE.read_text())
RANK0 = {**RANK1, "tp_rank": 0, "head_vocab_range": [0, 1024], "head_real_vocab_range": [0, 1024]}
RECEIPTS = [RANK0, RANK1]
CHECKPOINT = {"file": "model.safetensors", "tensor": "lm_head.weight", "dtype": "BF16"}

pytestmark = pytest.mark.usefixtures("quiet_env")


def diagnostics(rank: int) -> dict:
    return {
        "rank": rank,
        "family": "llama-eagle1",
        "target_class": "vllm.model_executor.models.llama.LlamaForCausalLM",
        "head": {
            "scale": 0.0125,
            "checkpoint": {**CHECKPOINT, "shape": [2048, 64], "rows": [rank * 1024, 1024 + rank]},
        },
        "exact_pick": {"top_k": 8},
        "validation": {"passed": True, "reason": None},
    }


RANKS_RECORD = {"schema": "draft-head-fp8-ranks/v1", "tp_size": 2, "problems": [], "passed": True}


def keep_node(root: Path, where: NodePlace, *, receipts=RECEIPTS, barrier=None, only=None):
    """What the plugin does on one node: join the node's boot (in turns), keep each rank's
    files, the cross-rank record on rank 0's node, then seal (in turns)."""
    boots = []
    for rank in where.ranks if only is None else only:
        boot, not_kept = post_share._archive(
            where.launch_id, where.tp_size, rank, receipts[rank], diagnostics(rank), where
        )
        assert not_kept is None
        if rank == 0 and where.tp_size > 1:
            post_share._keep(boot, RANKS_PATH, RANKS_RECORD)
        boots.append(boot)
    for boot in boots:
        post_share._seal(boot, where)
    return boots[0] if boots else None


@pytest.fixture
def no_barrier(monkeypatch):
    monkeypatch.setattr(launch, "tp_barrier", lambda: None)


def two_nodes(launch_id="vllm-abc"):
    return [place(rank=r, launch_id=launch_id, node_keys=[(0, "a"), (1, "a")]) for r in (0, 1)]


def launch_at(roots, monkeypatch, launch_id="vllm-abc", receipts=RECEIPTS):
    for where, root in zip(two_nodes(launch_id), roots):
        monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(root))
        keep_node(root, where, receipts=receipts)


def cli(capsys, *argv):
    parser = argparse.ArgumentParser(prog="draft-head-fp8")
    add_archive_parser(parser.add_subparsers(dest="command"))
    code = run_archive(parser.parse_args(["archive", *map(str, argv)]))
    out, err = capsys.readouterr()
    return code, out + err


# ------------------------------------------------------------------ which ranks on which node


@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_nodes_partition_the_ranks_and_node_0_holds_rank_0(keys):
    places = [place(rank=r, launch_id="vllm-x", node_keys=keys) for r in range(len(keys))]
    nodes = {p.node_rank: p for p in places}
    assert sorted(nodes) == list(range(len(set(keys))))
    assert sorted(r for p in nodes.values() for r in p.ranks) == list(range(len(keys)))
    assert 0 in nodes[0].ranks
    for rank, p in enumerate(places):
        assert rank in p.ranks and p.nnodes == len(set(keys)) and p.tp_size == len(keys)
    # Every file of the launch is expected by exactly one node's boot, nothing twice.
    files = [f for p in nodes.values() for f in p.expected_files]
    assert sorted(files) == sorted(boot_files(len(keys)))
    assert len({p.boot_key for p in nodes.values()}) == len(nodes)


def test_one_node_is_the_boot_of_before():
    where = place(rank=1, launch_id="vllm-x", node_keys=[(0, "h", "b")] * 2)
    assert where == single_node(launch_id="vllm-x", tp_size=2)
    assert where.boot_key == "vllm-x" and where.expected_files == boot_files(2)


def test_a_long_launch_id_still_names_a_valid_node_boot():
    where = place(rank=1, launch_id="v" * 64, node_keys=["a", "b"])
    assert where.boot_key == "v" * 58 + "-node1" and where.record()["launch_id"] == "v" * 64


def test_every_node_reaches_every_barrier_and_a_failure_is_raised_after():
    calls = []

    def fail():
        raise ValueError("disk gone")

    where = place(rank=1, launch_id="vllm-x", node_keys=["a", "b", "c"])
    with pytest.raises(ValueError, match="disk gone"):
        launch.in_node_turns(where, fail, barrier=lambda: calls.append("barrier"))
    assert calls == ["barrier"] * 3


# ------------------------------------------------------------------------ the node boots


def test_each_node_seals_its_own_files_in_its_own_root(tmp_path, monkeypatch, no_barrier):
    roots = [tmp_path / "node0", tmp_path / "node1"]
    launch_at(roots, monkeypatch)
    for node, root in enumerate(roots):
        (boot,) = Archive(root).boots()
        assert boot.status == "sealed" and boot.launch_id == f"vllm-abc-node{node}"
        assert boot.identity[LAUNCH_RECORD] == {
            "launch_id": "vllm-abc", "node_rank": node, "nnodes": 2, "ranks": [node], "tp_size": 2
        }  # fmt: skip
        assert Archive(root).verify().ok
    view = launch_view(roots)
    assert view.ok, view.problems
    assert (view.launch_id, view.nnodes, view.tp_size) == ("vllm-abc", 2, 2)
    assert [r["receipt"] for r in view.ranks] == ["valid", "valid"]


def test_nodes_sharing_one_root_take_turns_and_make_one_chain(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(tmp_path / "shared"))
    turns = threading.Barrier(2)
    monkeypatch.setattr(launch, "tp_barrier", lambda: turns.wait(timeout=30))
    errors = []

    def node(where):
        try:
            keep_node(tmp_path / "shared", where)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(w,)) for w in two_nodes()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    archive = Archive(tmp_path / "shared")
    report = archive.verify()
    assert report.ok and [b.status for b in archive.boots()] == ["sealed", "sealed"]
    # Node 0 took the first turn: its boot the first number and the first link of the chain.
    assert report.chain == ["00000001-vllm-abc-node0", "00000002-vllm-abc-node1"]
    assert launch_view([tmp_path / "shared"]).ok


def test_single_node_boots_are_a_launch_of_one_node(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(tmp_path / "root"))
    keep_node(tmp_path / "root", single_node(launch_id="vllm-one", tp_size=2))
    (boot,) = Archive(tmp_path / "root").boots()
    assert LAUNCH_RECORD not in boot.identity and boot.launch_id == "vllm-one"
    view = launch_view([tmp_path / "root"])
    assert view.ok and (view.nnodes, view.tp_size) == (1, 2), view.problems


def test_a_tp1_boot_of_before_is_a_launch_of_one_rank(tmp_path, monkeypatch):
    v2 = json.loads((FIXTURE.parent / "cpu-tiny-post_share.json").read_text())
    assert receipt_verdict(v2) is None and "tp_rank" not in v2
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(tmp_path / "root"))
    keep_node(tmp_path / "root", single_node(launch_id="vllm-tp1", tp_size=1), receipts=[v2])
    view = launch_view([tmp_path / "root"])
    assert view.ok and (view.nnodes, view.tp_size) == (1, 1), view.problems


# ------------------------------------------------------------------------- what fails, why


def test_a_missing_node(tmp_path, monkeypatch, no_barrier):
    launch_at([tmp_path / "node0", tmp_path / "node1"], monkeypatch)
    view = launch_view([tmp_path / "node0"])
    assert view.problems == [
        "node 1 of 2 is missing: no boot of launch vllm-abc for it in the roots given"
    ]


def test_a_tampered_receipt(tmp_path, monkeypatch, no_barrier):
    roots = [tmp_path / "node0", tmp_path / "node1"]
    launch_at(roots, monkeypatch)
    (boot,) = Archive(roots[1]).boots()
    path = boot.path / receipt_path(1)
    path.write_bytes(path.read_bytes().replace(b'"tp_rank": 1,', b'"tp_rank": 0,'))
    (problem,) = launch_view(roots).problems
    assert problem.startswith(
        f"node 1's boot {boot.name} ({roots[1]}) is damaged: {receipt_path(1)}: content differs "
        "from MANIFEST.json: SHA-256 "
    )


def test_a_node_killed_during_start_up_is_incomplete_and_the_next_launch_is_clean(
    tmp_path, monkeypatch, no_barrier
):
    roots = [tmp_path / "node0", tmp_path / "node1"]
    first = two_nodes("vllm-first")
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(roots[0]))
    keep_node(roots[0], first[0])
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(roots[1]))
    # Node 1 joined its boot, then died before its rank kept a file: never sealed.
    Archive(roots[1]).join_boot(
        first[1].boot_key,
        expected_files=first[1].expected_files,
        extra={LAUNCH_RECORD: first[1].record()},
    )
    (dead,) = Archive(roots[1]).boots()
    assert dead.status == "incomplete"
    assert launch_view(roots).problems == [
        f"node 1's boot {dead.name} ({roots[1]}) is incomplete: {diagnostics_path(1)}, "
        f"{receipt_path(1)} missing (never sealed: the node stopped before its ranks' proof was in)"
    ]
    launch_at(roots, monkeypatch, launch_id="vllm-second")
    assert launch_view(roots).launch_id == "vllm-second" and launch_view(roots).ok
    assert not launch_view(roots, "vllm-first").ok  # still reported, never hidden


def test_two_launches_mixed_up(tmp_path, monkeypatch, no_barrier):
    launch_at([tmp_path / "a0", tmp_path / "a1"], monkeypatch, launch_id="vllm-aaaa")
    launch_at([tmp_path / "b0", tmp_path / "b1"], monkeypatch, launch_id="vllm-bbbb")
    view = launch_view([tmp_path / "a0", tmp_path / "b1"])
    assert view.problems == [
        f"the roots' newest boots belong to different launches (vllm-aaaa in {tmp_path / 'a0'}, "
        f"vllm-bbbb in {tmp_path / 'b1'}): name one with --launch-id"
    ]
    assert launch_view([tmp_path / "a0", tmp_path / "b1"], "vllm-bbbb").problems == [
        "node 0 of 2 is missing: no boot of launch vllm-bbbb for it in the roots given"
    ]
    with pytest.raises(UnknownLaunchError, match="^no boot of launch 'vllm-cccc' in "):
        launch_view([tmp_path / "a0"], "vllm-cccc")


def test_a_copy_of_a_node_boot_in_two_roots_counts_once(tmp_path, monkeypatch, no_barrier):
    roots = [tmp_path / "node0", tmp_path / "node1"]
    launch_at(roots, monkeypatch)
    shutil.copytree(roots[1], tmp_path / "again")
    view = launch_view([*roots, tmp_path / "again"])
    assert view.ok and any("the same bytes" in note for note in view.notes)


def test_an_invalid_receipt_and_disagreeing_ranks(tmp_path, monkeypatch, no_barrier):
    bad = {**RANK1, "eligible": False}
    launch_at([tmp_path / "n0", tmp_path / "n1"], monkeypatch, receipts=[RANK0, bad])
    (boot,) = Archive(tmp_path / "n1").boots()
    assert receipt_verdict(bad) == "receipt is not eligible"
    assert launch_view([tmp_path / "n0", tmp_path / "n1"]).problems == [
        f"rank 1's receipt (node 1, boot {boot.name}) is not valid: receipt is not eligible"
    ]
    other = {**RANK1, "draft_config_hidden_size": 128, "head_partition_hidden_size": 128}
    launch_at([tmp_path / "m0", tmp_path / "m1"], monkeypatch, "vllm-other", [RANK0, other])
    problems = launch_view([tmp_path / "m0", tmp_path / "m1"]).problems
    assert any(p.startswith("ranks disagree on the head shape: rank 0 ") for p in problems)


# ------------------------------------------------------------------------ the command line


def test_cli_launch_exit_codes_and_list_names_the_node(tmp_path, monkeypatch, no_barrier, capsys):
    roots = [tmp_path / "node0", tmp_path / "node1"]
    launch_at(roots, monkeypatch)
    code, out = cli(capsys, "launch", *roots)
    assert code == 0 and out.rstrip().endswith(
        "launch: ok, 2 node boot(s) sealed and intact, 2 rank receipt(s) valid and agreeing"
    )
    code, out = cli(capsys, "launch", roots[0], "--json")
    assert code == 1 and json.loads(out)["problems"][0].startswith("node 1 of 2 is missing")
    code, out = cli(capsys, "launch", roots[0], "--launch-id", "vllm-nope")
    assert code == 2 and "error: no boot of launch 'vllm-nope'" in out
    code, out = cli(capsys, "launch", tmp_path / "nowhere")
    assert code == 2 and "error: no archive at" in out
    code, out = cli(capsys, "list", "--root", roots[1])
    assert code == 0 and "  1/2  " in out.splitlines()[1]
    code, out = cli(capsys, "show", "-1", "--root", roots[1])
    assert "  node:        1 of 2 of launch vllm-abc, ranks [1] of TP 2" in out
