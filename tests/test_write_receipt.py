"""Write-once receipt files (docs/contract.md, "Receipt file"): exact bytes, parents, never
overwrite, racing writers in real processes, SIGKILL at random instants, and the named-temporary
fallback of ``durable.create_exclusive`` for filesystems without ``O_TMPFILE``.

No torch here: child processes import only the package.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from draft_head_fp8 import durable, write_runtime_receipt
from draft_head_fp8.evidence.encoding import document_bytes as receipt_bytes

RECEIPT = {
    "schema": "draft-head-fp8-runtime-receipt/v2",
    "phase": "post_share",
    "eligible": True,
    "head_method": "Fp8PerTensorOnlineLinearMethod",
    "head_expected_weight_shape": [1024, 262144],
    "head_weight": {"dtype": "torch.float8_e4m3fn", "finite": True, "shape": [1024, 262144]},
    "note": "ünïcödé ✓",
}


def expected_bytes(receipt):
    return (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode("utf-8")


def test_exact_bytes_and_parents(tmp_path):
    path = tmp_path / "a" / "b" / "c" / "receipt.json"
    assert write_runtime_receipt(RECEIPT, path) is None
    assert path.read_bytes() == expected_bytes(RECEIPT)
    assert receipt_bytes(RECEIPT) == expected_bytes(RECEIPT)
    assert path.read_bytes().endswith(b"}\n")
    assert "ünïcödé" not in path.read_text(encoding="utf-8")  # json.dumps escapes (ensure_ascii)
    assert json.loads(path.read_text(encoding="utf-8")) == RECEIPT
    assert sorted(os.listdir(path.parent)) == ["receipt.json"]
    assert stat.S_ISREG(os.stat(path).st_mode)


def test_str_path_and_existing_parent(tmp_path):
    path = str(tmp_path / "receipt.json")
    write_runtime_receipt({"b": 1, "a": [1, 2]}, path)
    assert open(path, "rb").read() == b'{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_never_overwrites(tmp_path):
    path = tmp_path / "receipt.json"
    write_runtime_receipt(RECEIPT, path)
    original = path.read_bytes()
    with pytest.raises(FileExistsError):
        write_runtime_receipt({"other": True}, path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["receipt.json"]


@pytest.mark.parametrize("kind", ["file", "dir", "dangling_symlink", "symlink"])
def test_anything_at_the_path_is_not_overwritten(tmp_path, kind):
    path = tmp_path / "receipt.json"
    elsewhere = tmp_path / "elsewhere"
    if kind == "file":
        path.write_bytes(b"partial")
    elif kind == "dir":
        path.mkdir()
    elif kind == "dangling_symlink":
        path.symlink_to(elsewhere)
    else:
        elsewhere.write_bytes(b"keep")
        path.symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        write_runtime_receipt(RECEIPT, path)
    if kind == "file":
        assert path.read_bytes() == b"partial"
    if kind == "dangling_symlink":
        assert not elsewhere.exists()
    if kind == "symlink":
        assert elsewhere.read_bytes() == b"keep"


@pytest.mark.parametrize(
    "receipt",
    [{"tensor": object()}, {"a": {1, 2}}, {"b": b"bytes"}, {("tuple",): 1}],
    ids=["object", "set", "bytes", "tuple-key"],
)
def test_non_serialisable_receipt_leaves_no_file(tmp_path, receipt):
    path = tmp_path / "new" / "receipt.json"
    with pytest.raises(TypeError):
        write_runtime_receipt(receipt, path)
    assert not path.exists()
    assert not path.parent.exists()  # not even the parent: nothing was started
    assert os.listdir(tmp_path) == []


def test_file_and_folder_are_fsynced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        mode = os.fstat(fd).st_mode
        synced.append("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write_runtime_receipt(RECEIPT, tmp_path / "new" / "receipt.json")
    assert "file" in synced
    assert synced.index("file") < len(synced) - 1 - synced[::-1].index("dir")  # folder after file
    assert synced[-1] == "dir"


# ---------------------------------------------------------------- racing writers (real processes)

WRITERS = 8
ROUNDS = 30


def _racer(index, root, barrier, queue):
    outcomes = []
    for round_ in range(ROUNDS):
        receipt = {"writer": index, "round": round_, "pad": "x" * (1000 * index)}
        barrier.wait(timeout=60)
        try:
            write_runtime_receipt(
                receipt, os.path.join(root, f"round{round_}", "deep", "receipt.json")
            )
            outcomes.append((round_, "ok"))
        except FileExistsError:
            outcomes.append((round_, "exists"))
        except BaseException as exc:  # anything else is a failure, reported to the parent
            outcomes.append((round_, f"{type(exc).__name__}: {exc}"))
    queue.put((index, outcomes))


def test_racing_writers_one_winner_per_round(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WRITERS)
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(i, str(tmp_path), barrier, queue)) for i in range(WRITERS)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    for round_ in range(ROUNDS):
        outcomes = {i: dict(results[i])[round_] for i in range(WRITERS)}
        winners = [i for i, o in outcomes.items() if o == "ok"]
        assert len(winners) == 1, outcomes
        assert all(o in ("ok", "exists") for o in outcomes.values()), outcomes
        folder = tmp_path / f"round{round_}" / "deep"
        assert os.listdir(folder) == ["receipt.json"]  # no temporary left by anyone
        winner = winners[0]
        receipt = {"writer": winner, "round": round_, "pad": "x" * (1000 * winner)}
        assert (folder / "receipt.json").read_bytes() == expected_bytes(receipt)


# ---------------------------------------------------------------- SIGKILL at random instants

KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from draft_head_fp8 import write_runtime_receipt

    folder = sys.argv[1]
    # 6 MB, mostly one string: serialising is quick, writing and fsyncing it takes a while.
    receipt = {"rows": list(range(2000)), "blob": "z" * 4_000_000, "more": "y" * 2_000_000}
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    i = 0
    while True:  # one new file after another until killed
        write_runtime_receipt(receipt, os.path.join(folder, f"r{i:05d}.json"))
        i += 1
    """
)


def _writer_receipt_bytes():
    receipt = {"rows": list(range(2000)), "blob": "z" * 4_000_000, "more": "y" * 2_000_000}
    return expected_bytes(receipt)


def test_sigkill_at_random_instants_leaves_no_partial_file(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    complete = _writer_receipt_bytes()
    assert len(complete) > 6_000_000
    rng = random.Random(1234)
    trials, files_seen = 50, 0
    started = time.monotonic()
    for trial in range(trials):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        proc = subprocess.Popen([sys.executable, str(script), str(folder)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0, 0.1))  # somewhere in the first few writes (~50 ms each)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        names = sorted(os.listdir(folder))
        # Only final names, numbered without gaps; never a stray temporary.
        assert names == [f"r{i:05d}.json" for i in range(len(names))], names
        for name in names:
            assert (folder / name).read_bytes() == complete, (trial, name)
        files_seen += len(names)
    assert files_seen > 0  # the writer did get to write: the kills landed among real writes
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------- the fallback without O_TMPFILE


@pytest.fixture
def no_tmpfile(monkeypatch):
    """A filesystem without O_TMPFILE: os.open answers EOPNOTSUPP to it (NFS, some FUSE)."""
    real_open = os.open
    calls = []

    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            calls.append(path)
            raise OSError(errno.EOPNOTSUPP, "O_TMPFILE not supported here")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    return calls


def test_fallback_writes_the_file_and_leaves_no_temp(tmp_path, no_tmpfile):
    path = tmp_path / "sub" / "receipt.json"
    write_runtime_receipt(RECEIPT, path)
    assert no_tmpfile  # the O_TMPFILE path was tried and refused
    assert path.read_bytes() == expected_bytes(RECEIPT)
    assert os.listdir(path.parent) == ["receipt.json"]
    durable.create_exclusive(tmp_path / "raw.bin", b"\x00\x01payload")
    assert (tmp_path / "raw.bin").read_bytes() == b"\x00\x01payload"
    assert sorted(os.listdir(tmp_path)) == ["raw.bin", "sub"]


def test_fallback_never_overwrites_and_leaves_no_temp(tmp_path, no_tmpfile):
    path = tmp_path / "receipt.json"
    path.write_bytes(b"original")
    # create_exclusive itself (no pre-check): the link step must refuse.
    with pytest.raises(FileExistsError):
        durable.create_exclusive(path, b"new bytes")
    assert path.read_bytes() == b"original"
    assert os.listdir(tmp_path) == ["receipt.json"]


def test_fallback_failure_mid_write_leaves_nothing(tmp_path, no_tmpfile, monkeypatch):
    def failing_fsync(fd):
        raise OSError(errno.EIO, "disk went away")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk went away"):
        durable.create_exclusive(tmp_path / "receipt.json", b"data")
    assert os.listdir(tmp_path) == []


def test_tmpfile_failure_mid_write_leaves_nothing(tmp_path, monkeypatch):
    def failing_fsync(fd):
        raise OSError(errno.EIO, "disk went away")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk went away"):
        durable.create_exclusive(tmp_path / "receipt.json", b"data")
    assert os.listdir(tmp_path) == []


def test_fallback_racing_in_one_process(tmp_path, no_tmpfile):
    path = tmp_path / "receipt.json"
    durable.create_exclusive(path, b"first")
    for _ in range(5):
        with pytest.raises(FileExistsError):
            durable.create_exclusive(path, b"second")
    assert path.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["receipt.json"]


def test_other_open_errors_are_not_swallowed(tmp_path, monkeypatch):
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EACCES, "denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    with pytest.raises(PermissionError):
        durable.create_exclusive(tmp_path / "receipt.json", b"data")
    assert os.listdir(tmp_path) == []


def test_missing_folder_is_an_error_for_create_exclusive(tmp_path):
    with pytest.raises(FileNotFoundError):
        durable.create_exclusive(tmp_path / "absent" / "receipt.json", b"data")
