"""The archive under real processes: SIGKILL at random instants, and eight concurrent writers."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from draft_head_fp8.archive import Archive

# One boot per run, the way an engine start writes it. "ready" after the imports, then it waits
# for a line on stdin, so the parent's random delay falls on the writing and not on start-up.
WRITER = textwrap.dedent("""
    import json, sys, time
    from draft_head_fp8.archive import Archive
    root, boots, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    arc = Archive(root)
    print("ready", flush=True)
    if start_at:
        time.sleep(max(0.0, start_at - time.time()))
    else:
        sys.stdin.readline()
    for _ in range(boots):
        boot = arc.begin_boot()
        boot.add_bytes(
            "receipts/post_share-rank0.json",
            json.dumps({"head_method": "M", "pad": "r" * 300}).encode(),
        )
        boot.add_bytes("diagnostics/server.log", b"log line\\n" * 1000)
        boot.add_bytes("diagnostics/env.txt", b"x" * 100)
        boot.seal()
        print("sealed", boot.name, flush=True)
""")


@pytest.fixture
def writer(tmp_path):
    path = tmp_path / "writer.py"
    path.write_text(WRITER)
    return path


def spawn(writer, root, boots=1, start_at=0.0):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("VLLM_", "DRAFT_HEAD_FP8_")):
            del env[name]
    proc = subprocess.Popen(
        [sys.executable, str(writer), str(root), str(boots), repr(start_at)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def sealed_contents(arc):
    """{boot: {relative path: sha256}} of every sealed boot, read straight from the disk."""
    out = {}
    for boot in arc.boots():
        if boot.status == "sealed":
            out[boot.name] = {
                str(p.relative_to(boot.path)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(boot.path.rglob("*"))
                if p.is_file()
            }
    return out


def test_sigkill_at_random_instants_leaves_sealed_or_incomplete_boots(tmp_path, writer):
    arc = Archive(tmp_path / "archive")
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    # Calibrate: how long one boot takes to write here, fsyncs included.
    proc = spawn(writer, arc.root)
    t0 = time.perf_counter()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().startswith("sealed")
    span = time.perf_counter() - t0  # up to the seal; interpreter exit is not part of the write
    assert proc.wait(timeout=30) == 0
    assert arc.verify().ok

    trials, outcomes = 60, {"none": 0, "incomplete": 0, "sealed": 0}
    for _ in range(trials):
        before = sealed_contents(arc)
        count = len(arc.boots())
        # The writer goes on sealing boots until killed, so the kill lands at a uniformly random
        # point of the cycle (begin, each add, seal) whatever the calibration says.
        proc = spawn(writer, arc.root, boots=10**6)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(rng.uniform(0, 2.5 * span))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stdin.close()
        boots = arc.boots()
        new = boots[count:]
        assert all(
            b.status == "sealed" for b in new[:-1]
        )  # only the boot being written may be cut short
        outcomes[new[-1].status if new else "none"] += 1
        assert {b.status for b in boots} <= {"sealed", "incomplete"}
        report = arc.verify()
        assert report.ok, [str(p) for p in report.problems]
        assert sorted(report.chain) == sorted(b.name for b in boots if b.status == "sealed")
        after = sealed_contents(arc)
        assert {k: after[k] for k in before} == before  # earlier boots untouched
        assert not [p for p in arc.root.rglob(".draft-head-fp8-tmp-*")]
    # The delays must land inside the writing, not only before or after it.
    print("outcomes", outcomes)
    assert outcomes["incomplete"] >= trials // 3, outcomes


def test_eight_processes_begin_fill_and_seal_at_once(tmp_path, writer):
    arc = Archive(tmp_path / "archive")
    start_at = time.time() + 1.0
    procs = [spawn(writer, arc.root, boots=2, start_at=start_at) for _ in range(8)]
    names = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        names += [line.split()[1] for line in out.splitlines() if line.startswith("sealed")]
    boots = arc.boots()
    assert len(names) == len(set(names)) == 16
    assert sorted(b.name for b in boots) == sorted(names)
    assert [b.seq for b in boots] == list(range(1, 17))
    assert all(b.status == "sealed" for b in boots)
    report = arc.verify()
    assert report.ok, [str(p) for p in report.problems]
    assert len(report.chain) == 16
    assert sorted(b.manifest["chain_index"] for b in boots) == list(range(16))


FULL_DISK = textwrap.dedent("""
    import json, os, sys
    from draft_head_fp8.archive import Archive, ArchiveError
    mount = sys.argv[1]
    arc = Archive(os.path.join(mount, "archive"))
    earlier = arc.begin_boot()
    earlier.add_bytes("receipts/r.json", b"{}")
    earlier.seal()
    boot = arc.begin_boot()
    out = {"earlier": earlier.name, "boot": boot.name}
    try:
        boot.add_bytes("diagnostics/big.log", b"x" * (1 << 20))  # 1 MiB into a 256 KiB filesystem
        out["add"] = "ok"
    except ArchiveError as exc:
        out["add"] = str(exc)
    out["partial"] = os.path.lexists(os.path.join(boot.path, "diagnostics", "big.log"))
    with open(os.path.join(mount, "filler"), "wb", buffering=0) as f:  # no room even for a manifest
        try:
            while True:
                f.write(b"f" * 4096)
        except OSError:
            pass
    try:
        boot.seal()
        out["seal"] = "ok"
    except (ArchiveError, OSError) as exc:
        out["seal"] = str(exc)
    report = arc.verify()
    out["full"] = {"ok": report.ok, "chain": report.chain, "incomplete": report.incomplete}
    os.unlink(os.path.join(mount, "filler"))
    boot.seal()
    report = arc.verify()
    out["after"] = {"ok": report.ok, "chain": report.chain, "incomplete": report.incomplete}
    print(json.dumps(out))
""")


def test_real_enospc_on_a_full_filesystem(tmp_path):
    import json

    helper, mount = tmp_path / "full_disk.py", tmp_path / "fs"
    helper.write_text(FULL_DISK)
    mount.mkdir()
    # A private mount namespace: the small tmpfs vanishes with the process, whatever happens.
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {mount}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(
            "cannot mount a small tmpfs here (needs root and unshare); "
            "the injected ENOSPC test covers it"
        )
    run = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$1" "$2" "$0"',
            str(mount),
            sys.executable,
            str(helper),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert "no space left" in out["add"] and "big.log" in out["add"]
    assert out["partial"] is False
    assert "no space left" in out["seal"]
    assert out["full"] == {"ok": True, "chain": [out["earlier"]], "incomplete": [out["boot"]]}
    assert out["after"] == {"ok": True, "chain": [out["earlier"], out["boot"]], "incomplete": []}
