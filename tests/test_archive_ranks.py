"""Multi-rank boots (tensor parallelism): one boot per engine start holding every rank's files,
sealed once by whichever rank completes it; real processes, real SIGKILL, real files."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draft_head_fp8.archive import (
    Archive,
    ArchiveError,
    BootIncompleteError,
    BootSealedError,
    InvalidNameError,
)
from draft_head_fp8.archive.diff import diff_boots
from draft_head_fp8.archive.documents import self_digest
from draft_head_fp8.archive.layout import encode_json
from draft_head_fp8.cli.archive import add_archive_parser, run_archive


def rank_files(rank: int) -> list[str]:
    return [f"receipts/post_share-rank{rank}.json", f"diagnostics/post_share-rank{rank}.json"]


def expected_for(ranks: int) -> list[str]:
    return [name for rank in range(ranks) for name in rank_files(rank)]


def add_rank(boot, rank: int, head_method: str = "Fp8PerTensorOnlineLinearMethod") -> None:
    receipt, diagnostics = rank_files(rank)
    boot.add_bytes(receipt, json.dumps({"head_method": head_method, "rank": rank}).encode())
    boot.add_bytes(diagnostics, json.dumps({"rank": rank, "pid": os.getpid()}).encode())


pytestmark = pytest.mark.usefixtures("quiet_env")


def tree(path):
    return sorted(
        (str(p.relative_to(path)), p.read_bytes() if p.is_file() else None) for p in path.rglob("*")
    )


# ------------------------------------------------------------------------------- the API


def test_ranks_share_one_boot_and_the_last_one_seals(arc):
    expected = expected_for(2)
    first = arc.join_boot("tp-launch", expected_files=expected, extra={"tp_size": 2})
    second = Archive(arc.root).join_boot("tp-launch", expected_files=list(reversed(expected)))
    assert (first.name, second.name) == (second.name, first.name) == ("00000001-tp-launch",) * 2
    assert json.loads((first.path / "boot.json").read_bytes())["expected_files"] == sorted(expected)
    assert first.identity["tp_size"] == 2 and second.expected_files == sorted(expected)
    add_rank(first, 0)
    assert first.seal_if_complete() is None and first.status == "incomplete"
    add_rank(second, 1)
    manifest = second.seal_if_complete()
    assert manifest is not None and first.status == "sealed"
    assert [f["path"] for f in manifest["files"]] == sorted(["boot.json", *expected])
    assert first.seal_if_complete() is None and second.seal_if_complete() is None
    report = arc.verify()
    assert report.ok and report.chain == [first.name] and report.expected == {}


def test_join_refuses_a_sealed_launch_and_a_different_wait_list(arc):
    boot = arc.join_boot("tp-a", expected_files=expected_for(1))
    with pytest.raises(ArchiveError, match="expects"):
        arc.join_boot("tp-a", expected_files=expected_for(2))
    add_rank(boot, 0)
    boot.seal()
    with pytest.raises(BootSealedError, match="new launch id"):
        arc.join_boot("tp-a", expected_files=expected_for(1))
    plain = arc.begin_boot(launch_id="tp-b")  # a boot that waits for nothing is no multi-rank boot
    with pytest.raises(ArchiveError, match="expects None"):
        arc.join_boot("tp-b", expected_files=expected_for(1))
    assert [b.name for b in arc.boots()] == [boot.name, plain.name]


@pytest.mark.parametrize(
    "expected",
    [[], "receipts/r.json", ["boot.json"], ["../x"], ["MANIFEST.json"], ["a.json", "a.json"], [1]],
)
def test_join_refuses_a_bad_wait_list_and_leaves_no_boot(arc, expected):
    with pytest.raises(ValueError):
        arc.join_boot("tp-a", expected_files=expected)
    with pytest.raises(ValueError, match="expected_files"):
        arc.join_boot("tp-a", expected_files=["r.json"], extra={"expected_files": ["x"]})
    with pytest.raises(ValueError, match="launch id"):
        arc.join_boot("../x", expected_files=["r.json"])
    assert arc.boots() == []
    with pytest.raises(InvalidNameError):
        arc.join_boot("tp-a", expected_files=["a/../../b"])


def test_seal_with_missing_expected_files_raises_and_writes_nothing(arc):
    boot = arc.join_boot("tp-a", expected_files=expected_for(3))
    add_rank(boot, 0)
    add_rank(boot, 2)
    before = tree(arc.root)
    with pytest.raises(BootIncompleteError) as info:
        boot.seal()
    assert info.value.missing == sorted(rank_files(1))
    assert "receipts/post_share-rank1.json" in str(info.value)
    assert tree(arc.root) == before and not (boot.path / "MANIFEST.json").exists()
    add_rank(boot, 1)
    assert boot.seal()["chain_index"] == 0 and arc.verify().ok


def test_a_boot_that_waits_for_nothing_seals_if_complete_at_once(arc):
    boot = arc.begin_boot()
    assert boot.expected_files is None
    assert boot.seal_if_complete() is not None and boot.seal_if_complete() is None


def test_boot_json_that_cannot_be_read_is_never_sealed(arc):
    boot = arc.begin_boot()
    (boot.path / "boot.json").unlink()
    (boot.path / "boot.json").write_bytes(b'{"expected_files": ')
    with pytest.raises(ArchiveError, match="boot.json cannot be read"):
        boot.seal()
    with pytest.raises(ArchiveError, match="boot.json cannot be read"):
        boot.seal_if_complete()
    assert boot.status == "incomplete"


def test_verify_names_a_boot_sealed_without_an_expected_file(arc):
    boot = arc.join_boot("tp-a", expected_files=expected_for(2))
    add_rank(boot, 0)
    add_rank(boot, 1)
    boot.seal()
    # Remove rank 1's receipt and the manifest's entry for it, own digest recomputed: only
    # boot.json (protected by the manifest's hash of it) still says the receipt belongs here.
    (boot.path / "receipts/post_share-rank1.json").unlink()
    path = boot.path / "MANIFEST.json"
    manifest = json.loads(path.read_bytes())
    manifest["files"] = [
        f for f in manifest["files"] if f["path"] != "receipts/post_share-rank1.json"
    ]
    manifest["manifest_sha256"] = self_digest(manifest)
    path.write_bytes(encode_json(manifest))
    report = arc.verify()
    assert [p.path for p in report.problems] == [str(path)]
    assert report.problems[0].message.startswith("sealed without receipts/post_share-rank1.json")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ranks=st.integers(1, 4), data=st.data())
def test_any_order_of_adds_and_seal_attempts_seals_once_when_complete(
    tmp_path_factory, ranks, data
):
    # A model of the ranks' calls in any order: seal_if_complete seals exactly when the last
    # expected file is in and nobody sealed yet; seal() refuses until then; nothing seals twice.
    arc = Archive(tmp_path_factory.mktemp("archive"))
    expected = expected_for(ranks)
    handles = [arc.join_boot("tp-launch", expected_files=expected) for _ in range(ranks)]
    steps = (
        [("add", name) for name in expected]
        + [("try", r) for r in range(ranks)] * 2
        + [("seal", data.draw(st.integers(0, ranks - 1)))]
    )
    present, seals = set(), 0
    for kind, what in data.draw(st.permutations(steps)):
        if kind == "add":
            handles[int(what.split("rank")[1].split(".")[0])].add_bytes(what, b"{}")
            present.add(what)
            continue
        complete = present == set(expected)
        if kind == "try":
            manifest = handles[what].seal_if_complete()
            assert (manifest is not None) == (complete and not seals)
        elif seals:
            with pytest.raises(BootSealedError):
                handles[what].seal()
            manifest = None
        elif not complete:
            with pytest.raises(BootIncompleteError) as info:
                handles[what].seal()
            assert info.value.missing == sorted(set(expected) - present)
            manifest = None
        else:
            manifest = handles[what].seal()
        if manifest is not None:
            seals += 1
            assert {f["path"] for f in manifest["files"]} == {"boot.json", *expected}
    report = arc.verify()
    assert report.ok and seals <= 1
    name = handles[0].name
    assert (report.sealed, report.incomplete) == (([name], []) if seals else ([], [name]))
    if not seals:  # the last call was an add: complete, waiting for one more try
        assert report.expected[name] == {"present": sorted(expected), "missing": []}


# ------------------------------------------------------------------------- CLI and diff


def cli(capsys, *argv):
    parser = argparse.ArgumentParser(prog="draft-head-fp8")
    add_archive_parser(parser.add_subparsers(dest="command", required=True))
    code = run_archive(parser.parse_args(["archive", *map(str, argv)]))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_shows_how_many_expected_files_are_there(arc, capsys):
    done = arc.join_boot("tp-done", expected_files=expected_for(2))
    add_rank(done, 0)
    add_rank(done, 1)
    assert done.seal_if_complete()
    waiting = arc.join_boot("tp-waiting", expected_files=expected_for(2))
    add_rank(waiting, 1)
    plain = arc.begin_boot()
    code, out, _ = cli(capsys, "list", "--root", arc.root)
    lines = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert code == 0 and lines["tp-done"].endswith("expected 4/4")
    assert lines["tp-waiting"].endswith("expected 2/4") and "expected" not in lines[plain.launch_id]
    code, out, _ = cli(capsys, "list", "--root", arc.root, "--json")
    rows = {r["launch_id"]: r for r in json.loads(out)}
    assert rows["tp-waiting"]["expected_files"] == sorted(expected_for(2))
    assert rows["tp-waiting"]["expected_missing"] == sorted(rank_files(0))
    assert rows["tp-done"]["expected_missing"] == []
    assert rows[plain.launch_id]["expected_files"] is None
    code, out, _ = cli(capsys, "show", "tp-waiting", "--root", arc.root)
    missing = "diagnostics/post_share-rank0.json, receipts/post_share-rank0.json"
    assert code == 0 and f"expected:    2/4 files present (missing: {missing})" in out
    code, out, _ = cli(capsys, "show", "tp-done", "--root", arc.root, "--json")
    assert json.loads(out)["boot"]["expected_missing"] == []
    code, out, _ = cli(capsys, "verify", "--root", arc.root)
    assert (
        code == 0
        and (
            f"incomplete: {waiting.name} (no MANIFEST.json; listed, never hidden; "
            f"expected 2/4 files present, missing: {missing})"
        )
        in out
    )
    code, out, _ = cli(capsys, "verify", "--root", arc.root, "--json")
    assert json.loads(out)["expected"] == {
        waiting.name: {"present": sorted(rank_files(1)), "missing": sorted(rank_files(0))}
    }


def test_two_multi_rank_boots_diff_rank_by_rank(arc):
    a = arc.join_boot("tp-a", expected_files=expected_for(2))
    add_rank(a, 0)
    add_rank(a, 1)
    a.seal_if_complete()
    b = arc.join_boot("tp-b", expected_files=expected_for(2))
    add_rank(b, 0)
    add_rank(b, 1, head_method="UnquantizedLinearMethod")
    b.seal_if_complete()
    result = diff_boots(a, b)
    by_path = {r["path"]: r for r in result["receipts"]}
    assert sorted(by_path) == ["receipts/post_share-rank0.json", "receipts/post_share-rank1.json"]
    assert by_path["receipts/post_share-rank0.json"]["changes"] == []
    assert by_path["receipts/post_share-rank1.json"]["changes"] == [
        {
            "key": "head_method",
            "a": "Fp8PerTensorOnlineLinearMethod",
            "b": "UnquantizedLinearMethod",
            "in_a": True,
            "in_b": True,
        }
    ]


# --------------------------------------------------------------------- real processes


def _rank_worker(root, rank, ranks, rounds, barrier, results):
    arc = Archive(root)
    try:
        for r in range(rounds):
            barrier.wait(timeout=30)  # all ranks of a round start together
            boot = arc.join_boot(f"round-{r}", expected_files=expected_for(ranks))
            add_rank(boot, rank)
            results.put((r, rank, boot.name, boot.seal_if_complete() is not None))
    except BaseException as exc:
        barrier.abort()  # the others stop waiting for this rank
        results.put(("error", rank, repr(exc), False))
        raise


def test_ranks_racing_in_processes_make_one_boot_sealed_once(tmp_path):
    ranks, rounds = 4, 20
    arc = Archive(tmp_path / "archive")
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(ranks), ctx.Queue()
    procs = [
        ctx.Process(
            target=_rank_worker, args=(str(arc.root), rank, ranks, rounds, barrier, results)
        )
        for rank in range(ranks)
    ]
    for proc in procs:
        proc.start()
    rows = []
    while len(rows) < ranks * rounds:
        rows.append(results.get(timeout=60))
        assert rows[-1][0] != "error", rows[-1]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    for r in range(rounds):
        mine = [row for row in rows if row[0] == r]
        assert len({name for _, _, name, _ in mine}) == 1, mine  # one boot per launch
        assert sum(sealed for *_, sealed in mine) == 1, mine  # sealed exactly once
    boots = arc.boots()
    assert len(boots) == rounds and [b.seq for b in boots] == list(range(1, rounds + 1))
    assert all(b.status == "sealed" and b.launch_id == f"round-{b.seq - 1}" for b in boots)
    for boot in boots:
        assert {f["path"] for f in boot.manifest["files"]} == {"boot.json", *expected_for(ranks)}
    report = arc.verify()
    assert report.ok, [str(p) for p in report.problems]
    assert len(report.chain) == rounds and report.incomplete == []
    assert sorted(b.manifest["chain_index"] for b in boots) == list(range(rounds))


# A rank as its own interpreter: join, say so, wait for "go", add its files, try to seal.
RANK = textwrap.dedent("""
    import json, os, sys
    from draft_head_fp8.archive import Archive
    root, launch, rank, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    folders = ("receipts", "diagnostics")
    expected = [f"{d}/post_share-rank{r}.json" for r in range(ranks) for d in folders]
    boot = Archive(root).join_boot(launch, expected_files=expected)
    print("joined", boot.name, flush=True)
    sys.stdin.readline()
    for d in folders:
        data = json.dumps({"rank": rank, "pad": "x" * 4000}).encode()
        boot.add_bytes(f"{d}/post_share-rank{rank}.json", data)
    print("sealed" if boot.seal_if_complete() else "waiting", flush=True)
""")


@pytest.fixture
def rank_script(tmp_path):
    path = tmp_path / "rank.py"
    path.write_text(RANK)
    return path


def start_rank(script, root, launch, rank, ranks):
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root), launch, str(rank), str(ranks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()
    assert line[0] == "joined", line
    return proc, line[1]


def go(proc):
    proc.stdin.write("go\n")
    proc.stdin.flush()


def test_a_rank_killed_before_it_writes_leaves_an_incomplete_boot(arc, rank_script, capsys):
    earlier = arc.begin_boot()
    earlier.seal()
    (r0, name0), (r1, name1) = (
        start_rank(rank_script, arc.root, "tp-crash", r, 2) for r in range(2)
    )
    assert name0 == name1
    r1.send_signal(signal.SIGKILL)
    assert r1.wait(timeout=30) == -signal.SIGKILL
    go(r0)
    assert r0.communicate(timeout=30)[0].split() == ["waiting"] and r0.returncode == 0
    boot = arc.find("tp-crash")
    assert boot.status == "incomplete" and not (boot.path / "MANIFEST.json").exists()
    report = arc.verify()
    assert report.ok and report.incomplete == [boot.name] and report.chain == [earlier.name]
    assert report.expected[boot.name] == {
        "present": sorted(rank_files(0)),
        "missing": sorted(rank_files(1)),
    }
    with pytest.raises(BootIncompleteError):
        boot.seal()
    later = arc.begin_boot()
    manifest = later.seal()
    assert manifest["previous_boot"] == earlier.name and manifest["chain_index"] == 1
    report = arc.verify()
    assert report.ok and report.chain == [earlier.name, later.name]
    assert report.incomplete == [boot.name]


def test_sigkill_of_the_sealing_rank_at_random_instants(arc, rank_script):
    # Rank 0 finishes first, so rank 1 is the one that completes the boot and seals it; it is
    # killed at a random instant of adding and sealing. Whatever the instant, the boot is sealed
    # with every rank's files or not sealed at all, and the chain stays one line.
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    r0, _ = start_rank(rank_script, arc.root, "calibrate", 0, 2)
    r1, _ = start_rank(rank_script, arc.root, "calibrate", 1, 2)
    go(r0)
    assert r0.communicate(timeout=30)[0].split() == ["waiting"]
    t0 = time.perf_counter()
    go(r1)
    assert r1.stdout.readline().strip() == "sealed"
    span = time.perf_counter() - t0
    r1.communicate(timeout=30)
    outcomes = {"sealed": 0, "incomplete": 0}
    for trial in range(10):
        launch = f"trial-{trial}"
        r0, _ = start_rank(rank_script, arc.root, launch, 0, 2)
        r1, _ = start_rank(rank_script, arc.root, launch, 1, 2)
        go(r0)
        assert r0.communicate(timeout=30)[0].split() == ["waiting"]
        go(r1)
        time.sleep(rng.uniform(0, 1.5 * span))
        r1.send_signal(signal.SIGKILL)
        r1.wait(timeout=30)
        r1.stdout.close()
        r1.stdin.close()
        boot = arc.find(launch)
        outcomes[boot.status] += 1
        if boot.status == "sealed":
            assert {f["path"] for f in boot.manifest["files"]} == {"boot.json", *expected_for(2)}
        report = arc.verify()
        assert report.ok, [str(p) for p in report.problems]
        assert sorted(report.chain) == sorted(b.name for b in arc.boots() if b.status == "sealed")
        assert not list(arc.root.rglob(".draft-head-fp8-tmp-*"))
    print("outcomes", outcomes)
