"""The per-boot diagnostic archive (docs/contract.md, "Archive"): API, damage detection, pruning,
CLI.

Real files in tmp_path throughout; crash and concurrency tests with real processes live in
test_archive_crash.py.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draft_head_fp8 import archive, durable, schemas
from draft_head_fp8.archive import (
    Archive,
    ArchiveError,
    BootSealedError,
    UnknownBootError,
    UnsafePathError,
)
from draft_head_fp8.archive.diff import diff_boots
from draft_head_fp8.archive.documents import self_digest as _self_digest
from draft_head_fp8.archive.layout import encode_json as _encode_json
from draft_head_fp8.cli.archive import add_archive_parser, run_archive

RECEIPT = {
    "schema": "draft-head-fp8-runtime-receipt/v2",
    "phase": "post_share",
    "head_method": "Fp8PerTensorOnlineLinearMethod",
    "head_kernel": "Fp8LinearOp",
    "head_weight": {"dtype": "torch.float8_e4m3fn", "shape": [64, 512]},
}


pytestmark = pytest.mark.usefixtures("quiet_env")


def sealed_boot(arc, receipt=RECEIPT, log=b"engine started\n", **kw):
    boot = arc.begin_boot(**kw)
    boot.add_bytes("receipts/post_share-rank0.json", json.dumps(receipt, indent=2).encode())
    boot.add_bytes("diagnostics/server.log", log)
    boot.seal()
    return boot


def problem_paths(report):
    return [p.path for p in report.problems]


# ------------------------------------------------------------------------------------ basics


def test_import_pulls_in_neither_torch_nor_vllm():
    code = (
        "import sys, draft_head_fp8.archive as a; "
        "bad = [m for m in ('torch', 'vllm', 'jsonschema') if m in sys.modules]; "
        "a.collect_identity(); print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bytes_are_kept_exactly_with_private_modes(arc, tmp_path):
    data = bytes(range(256)) * 3
    src = tmp_path / "server.log"
    src.write_bytes(b"\x00line one\r\nline two\n")
    boot = arc.begin_boot()
    boot.add_bytes("receipts/post_share-rank0.json", data)
    boot.add_file("diagnostics/server.log", src)
    assert boot.status == "incomplete"
    manifest = boot.seal()
    assert boot.status == "sealed"
    assert (boot.path / "receipts/post_share-rank0.json").read_bytes() == data
    assert (boot.path / "diagnostics/server.log").read_bytes() == src.read_bytes()
    assert [f["path"] for f in manifest["files"]] == [
        "boot.json",
        "diagnostics/server.log",
        "receipts/post_share-rank0.json",
    ]
    assert manifest["previous"] is None and manifest["chain_index"] == 0
    for path in [boot.path, boot.path / "receipts", boot.path / "diagnostics"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in boot.path.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert arc.verify().ok


def test_nothing_is_rewritten(arc):
    boot = arc.begin_boot()
    boot.add_bytes("receipts/a.json", b"{}")
    with pytest.raises(FileExistsError):
        boot.add_bytes("receipts/a.json", b'{"other": 1}')
    with pytest.raises(FileExistsError):
        boot.add_bytes("boot.json", b"{}")
    assert (boot.path / "receipts/a.json").read_bytes() == b"{}"
    boot.seal()
    with pytest.raises(BootSealedError):
        boot.add_bytes("receipts/b.json", b"{}")
    with pytest.raises(BootSealedError):
        boot.seal()
    # Another process's handle on the same boot sees the seal too.
    with pytest.raises(BootSealedError):
        arc.find(boot.seq).add_bytes("receipts/c.json", b"{}")


def test_identity_records_what_matters_and_no_secrets(arc, monkeypatch):
    monkeypatch.setenv("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8", "1")
    monkeypatch.setenv("DRAFT_HEAD_FP8_MODE", "strict")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("VLLM_API_KEY", "hunter2")
    monkeypatch.setenv("VLLM_HF_TOKEN", "hf_abc")
    monkeypatch.setenv("DRAFT_HEAD_FP8_DB_PASSWORD", "pw")
    monkeypatch.setenv("VLLM_REMOTE_URL", "https://user:pw@example.com/x")
    monkeypatch.setenv("VLLM_SOMETHING", "hf_looks_like_a_token")
    monkeypatch.setenv("HOME_SECRET_UNRELATED", "x")
    monkeypatch.setenv("INVOCATION_ID", "abc123")
    boot = arc.begin_boot(extra={"device_names": ["NVIDIA H200"], "run": "nightly"})
    raw = (boot.path / "boot.json").read_bytes()
    ident = json.loads(raw)
    assert ident["env"] == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "DRAFT_HEAD_FP8_MODE": "strict",
        "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8": "1",
    }
    assert ident["env_withheld"] == [
        "DRAFT_HEAD_FP8_DB_PASSWORD",
        "VLLM_API_KEY",
        "VLLM_HF_TOKEN",
        "VLLM_REMOTE_URL",
        "VLLM_SOMETHING",
    ]
    for secret in (b"hunter2", b"hf_abc", b"user:pw", b"hf_looks"):
        assert secret not in raw
    assert ident["device_names"] == ["NVIDIA H200"] and ident["run"] == "nightly"
    assert ident["invocation_id"] == "abc123"
    assert (
        ident["seq"] == boot.seq
        and ident["launch_id"] == boot.launch_id
        and ident["pid"] == os.getpid()
    )
    assert ident["kernel_boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert set(ident["versions"]) == {"python", "torch", "vllm", "draft-head-fp8"}
    assert ident["versions"]["draft-head-fp8"]


def test_bad_extra_leaves_no_boot(arc):
    with pytest.raises(ValueError):
        arc.begin_boot(extra={"seq": 7})
    with pytest.raises(ValueError):
        arc.begin_boot(extra={"x": object()})
    assert arc.boots() == []


def test_sequence_numbers_and_lookup(arc):
    boots = [arc.begin_boot() for _ in range(3)]
    assert [b.seq for b in boots] == [1, 2, 3]
    assert [b.name for b in arc.boots()] == [b.name for b in boots]
    assert arc.find(2).name == boots[1].name
    assert arc.find("-1").name == boots[2].name
    assert arc.find(-3).name == boots[0].name
    assert arc.find(boots[1].launch_id).seq == 2
    assert arc.find(boots[1].launch_id[:12]).seq == 2
    assert arc.find(boots[0].name).seq == 1
    for ref in ("0", "4", "-4", "nope", "zzzzzzzz"):
        with pytest.raises(UnknownBootError):
            arc.find(ref)
    custom = arc.begin_boot(launch_id="engine-a")
    assert custom.name == "00000004-engine-a" and arc.find("engine-a").seq == 4
    with pytest.raises(ValueError):
        arc.begin_boot(launch_id="../x")


# ------------------------------------------------------------------------------ names, symlinks


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "/etc/passwd",
        "a/../../x",
        "receipts/../../escape",
        "",
        "a//b",
        "./a",
        "receipts/.hidden",
        "MANIFEST.json",
        "a\\..\\b",
        "x\x00y",
        "a/",
    ],
)
def test_names_that_escape_or_collide_are_refused(arc, name):
    boot = arc.begin_boot()
    with pytest.raises(ValueError, match="file name|MANIFEST"):
        boot.add_bytes(name, b"x")
    assert sorted(p.name for p in boot.path.iterdir()) == ["boot.json"]
    assert sorted(p.name for p in arc.root.iterdir()) == [".lock", boot.name]


_PARTS = st.sampled_from(
    ["..", ".", "", "receipts", "a", "/", "\\", "x.json", "..x", "~", "\x00", "\udc80", "é"]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.lists(_PARTS, min_size=1, max_size=6).map("/".join) | st.text(max_size=30))
def test_no_name_can_write_outside_its_boot(tmp_path, name):
    root = tmp_path / "archive"
    arc = Archive(root)
    boot = arc.boots()[0] if arc.boots() else arc.begin_boot()
    try:
        path = boot.add_bytes(name, b"x")
    except (ValueError, FileExistsError, ArchiveError):
        pass
    else:
        assert (
            os.path.realpath(path).startswith(str(boot.path) + os.sep) and path.read_bytes() == b"x"
        )
    assert sorted(os.listdir(tmp_path)) == ["archive"]
    assert sorted(os.listdir(root)) == [".lock", boot.name]


def test_symlinked_folder_in_boot_is_never_followed(arc, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    boot = arc.begin_boot()
    (boot.path / "receipts").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symlink"):
        boot.add_bytes("receipts/x.json", b"{}")
    assert list(outside.iterdir()) == []
    with pytest.raises(UnsafePathError, match="symlink"):
        boot.seal()
    report = arc.verify()
    assert not report.ok and str(boot.path / "receipts") in problem_paths(report)


def test_symlink_at_file_name_is_refused(arc, tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"keep me")
    boot = arc.begin_boot()
    (boot.path / "diagnostics").mkdir(mode=0o700)
    (boot.path / "diagnostics/server.log").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symlink"):
        boot.add_bytes("diagnostics/server.log", b"overwrite?")
    assert target.read_bytes() == b"keep me"


def test_symlink_planted_in_sealed_boot_or_root_is_caught(arc, tmp_path):
    boot = sealed_boot(arc)
    (boot.path / "receipts/extra.json").symlink_to(tmp_path)
    (arc.root / "00000099-fake").symlink_to(boot.path)
    report = arc.verify()
    assert not report.ok
    assert str(boot.path / "receipts/extra.json") in problem_paths(report)
    assert str(arc.root / "00000099-fake") in problem_paths(report)
    assert [b.name for b in arc.boots()] == [boot.name]  # the symlink is not a boot


# ------------------------------------------------------------------------------ damage detection


def _small_sealed(arc):
    boot = arc.begin_boot()
    boot.add_bytes(
        "receipts/r.json", b'{"head_method": "Fp8PerTensorOnlineLinearMethod", "shape": [4, 8]}\n'
    )
    boot.seal()
    files = [boot.path / "boot.json", boot.path / "receipts/r.json", boot.path / "MANIFEST.json"]
    assert all(len(f.read_bytes()) < 1024 for f in files)
    return boot, files


def test_every_single_bit_flip_is_caught(arc):
    boot, files = _small_sealed(arc)
    assert arc.verify().ok
    missed = []
    for path in files:
        original = path.read_bytes()
        buf = bytearray(original)
        with open(path, "r+b", buffering=0) as f:
            for i in range(len(buf)):
                for bit in range(8):
                    buf[i] ^= 1 << bit
                    f.seek(i)
                    f.write(buf[i : i + 1])
                    report = arc.verify()
                    if report.ok or not all(
                        p.startswith(str(boot.path)) for p in problem_paths(report)
                    ):
                        missed.append((path.name, i, bit))
                    buf[i] ^= 1 << bit
                f.seek(i)
                f.write(buf[i : i + 1])
        assert path.read_bytes() == original
    assert missed == []
    assert arc.verify().ok


def test_every_truncation_is_caught(arc):
    boot, files = _small_sealed(arc)
    missed = []
    for path in files:
        original = path.read_bytes()
        for length in range(len(original)):
            os.truncate(path, length)
            report = arc.verify()
            if report.ok or str(path) not in problem_paths(report):
                missed.append((path.name, length))
            with open(path, "r+b") as f:
                f.write(original)
        assert path.read_bytes() == original
    assert missed == []
    assert arc.verify().ok


def test_added_and_removed_files_are_named(arc):
    boot = sealed_boot(arc)
    (boot.path / "receipts/late.json").write_bytes(b"{}")
    report = arc.verify()
    assert problem_paths(report) == [str(boot.path / "receipts/late.json")]
    assert "not in MANIFEST.json" in report.problems[0].message
    (boot.path / "receipts/late.json").unlink()
    (boot.path / "diagnostics/server.log").unlink()
    report = arc.verify()
    assert problem_paths(report) == [str(boot.path / "diagnostics/server.log")]
    assert "missing" in report.problems[0].message


def _rewrite_manifest(boot, change):
    path = boot.path / "MANIFEST.json"
    manifest = json.loads(path.read_bytes())
    change(manifest)
    manifest["manifest_sha256"] = _self_digest(manifest)
    path.write_bytes(_encode_json(manifest))


def test_manifest_edited_with_recomputed_own_hash_is_caught_by_the_chain(arc):
    first, middle, last = (sealed_boot(arc) for _ in range(3))
    (middle.path / "diagnostics/server.log").write_bytes(b"forged\n")

    def forge(m):
        import hashlib

        for f in m["files"]:
            if f["path"] == "diagnostics/server.log":
                f["size"], f["sha256"] = 7, hashlib.sha256(b"forged\n").hexdigest()

    _rewrite_manifest(middle, forge)
    report = arc.verify()
    assert problem_paths(report) == [str(middle.path / "MANIFEST.json")]
    assert f"changed after {last.name} was sealed" in report.problems[0].message


def test_broken_chain_link_is_named(arc):
    first, middle, last = (sealed_boot(arc) for _ in range(3))
    import shutil

    shutil.rmtree(middle.path)
    report = arc.verify()
    assert problem_paths(report) == [str(last.path / "MANIFEST.json")]
    assert middle.name in report.problems[0].message and "deleted" in report.problems[0].message


def test_relinked_manifest_is_caught(arc):
    first, second, third = (sealed_boot(arc) for _ in range(3))
    # Point the last boot past the middle one, with a consistent own hash: a fork/skip.
    prev_raw = (first.path / "MANIFEST.json").read_bytes()
    import hashlib

    def skip(m):
        m["previous"], m["previous_boot"] = hashlib.sha256(prev_raw).hexdigest(), first.name

    _rewrite_manifest(third, skip)
    report = arc.verify()
    assert not report.ok
    assert str(third.path / "MANIFEST.json") in problem_paths(
        report
    )  # chain_index no longer follows
    assert any("forks" in p.message for p in report.problems)


def test_manifest_moved_to_another_boot_is_caught(arc):
    a = sealed_boot(arc)
    b = arc.begin_boot()
    (b.path / "MANIFEST.json").write_bytes((a.path / "MANIFEST.json").read_bytes())
    report = arc.verify()
    assert str(b.path / "MANIFEST.json") in problem_paths(report)


def test_unknown_manifest_major_version_is_rejected(arc):
    boot = sealed_boot(arc)
    _rewrite_manifest(boot, lambda m: m.update(schema="draft-head-fp8-archive-manifest/v2"))
    report = arc.verify()
    assert problem_paths(report) == [str(boot.path / "MANIFEST.json")]
    assert "unknown manifest schema" in report.problems[0].message


def test_manifest_of_the_wrong_shape_is_explained_by_the_schema(arc):
    boot = sealed_boot(arc)
    _rewrite_manifest(boot, lambda m: m.update(seq=str(m["seq"]), extra=1))
    report = arc.verify()
    assert problem_paths(report) == [str(boot.path / "MANIFEST.json")]
    message = report.problems[0].message
    assert message.startswith("invalid manifest: ")
    assert "'extra' was unexpected" in message and "seq: '1' is not of type 'integer'" in message


def test_the_schemas_name_the_archive_vocabulary():
    schema = schemas.load("archive-manifest-v1")
    assert set(schema["required"]) == set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["schema"]["const"] == archive.MANIFEST_SCHEMA
    files = schema["properties"]["files"]["items"]
    assert set(files["required"]) == set(files["properties"])
    assert files["additionalProperties"] is False
    assert (
        schemas.load("archive-pruned-v1")["properties"]["schema"]["const"] == archive.PRUNED_SCHEMA
    )


def test_a_float_where_the_manifest_has_an_integer_is_rejected(arc):
    # JSON Schema's "integer" takes 1.0, and RFC 8785 writes 1.0 as 1, so the own digest still
    # matches: only reading non-integers as Decimal keeps `"seq": 1.0` from passing for `1`.
    boot = sealed_boot(arc)
    _rewrite_manifest(boot, lambda m: m.update(seq=1.0))
    assert b'"seq": 1.0' in (boot.path / "MANIFEST.json").read_bytes()
    report = arc.verify()
    assert problem_paths(report) == [str(boot.path / "MANIFEST.json")]
    assert "seq: Decimal('1.0') is not of type 'integer'" in report.problems[0].message


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.just("a" * 64),
    st.just("a" * 64 + "\n"),
)


def _alike(value):
    """Another value of the same JSON type, often still valid: the boundary where the two checks
    must agree."""
    if isinstance(value, bool) or value is None:
        return st.just("a" * 64) | st.none()
    if isinstance(value, int):
        return st.integers(-1, 3)
    if isinstance(value, str):
        return st.text(max_size=3) | st.sampled_from(["b" * 64, value.upper(), value + "\n"])
    return st.just(value)


@st.composite
def _near(draw, base):
    """``base`` with up to three changes, anywhere in it: a key dropped, a value replaced by any
    scalar, an unexpected key added, an item dropped or repeated."""
    import copy

    doc = copy.deepcopy(base)
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        node, path = doc, []
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            keys = sorted(node) if isinstance(node, dict) else range(len(node))
            key = draw(st.sampled_from(keys))
            if not isinstance(node[key], (dict, list)):
                break
            path.append(key)
            node = node[key]
        change = draw(st.sampled_from(["drop", "replace", "replace", "replace", "add", "repeat"]))
        if isinstance(node, dict):
            key = draw(st.sampled_from(sorted(node))) if node else "extra"
            if change == "drop":
                node.pop(key, None)
            elif change == "replace":
                node[key] = draw(_alike(node.get(key)) if draw(st.booleans()) else _SCALARS)
            else:
                node[draw(st.sampled_from(["extra", "path", "seq", "boots"]))] = draw(_SCALARS)
        elif isinstance(node, list):
            if change == "drop" and node:
                node.pop()
            elif change == "repeat" and node:
                node.append(copy.deepcopy(node[0]))
            else:
                node.append(draw(_SCALARS))
    return doc


_MANIFEST_DOC = {
    "schema": "draft-head-fp8-archive-manifest/v1",
    "boot": "00000001-x",
    "seq": 1,
    "launch_id": "x",
    "sealed_at": "2024-01-01T00:00:00.000000Z",
    "chain_index": 0,
    "previous": None,
    "previous_boot": None,
    "manifest_sha256": "a" * 64,
    "files": [{"path": "boot.json", "size": 3, "sha256": "b" * 64}],
}
_PRUNED_DOC = {
    "schema": "draft-head-fp8-archive-pruned/v1",
    "pruned_at": "2024",
    "keep": 0,
    "boots": [
        {
            "boot": "00000001-x",
            "seq": 1,
            "launch_id": "x",
            "chain_index": 0,
            "manifest_sha256": "c" * 64,
        }
    ],
}


@settings(max_examples=400, deadline=None)
@given(doc=_near(_MANIFEST_DOC))
def test_fast_manifest_check_gives_jsonschemas_answer(doc):
    name = "archive-manifest-v1"
    assert schemas.is_valid(name, doc) == (schemas.errors(name, doc) == [])


@settings(max_examples=300, deadline=None)
@given(doc=_near(_PRUNED_DOC))
def test_fast_prune_record_check_gives_jsonschemas_answer(doc):
    name = "archive-pruned-v1"
    assert schemas.is_valid(name, doc) == (schemas.errors(name, doc) == [])


def test_sealing_and_numbering_never_import_jsonschema(arc):
    # Engine start reads the prune records to number a boot and to find the chain head; a damaged
    # record there must be skipped by the fast check, not explained by jsonschema.
    sealed_boot(arc)
    sealed_boot(arc)
    arc.prune(1)
    (arc.root / "PRUNED-00000000T000000000000Z-damaged.json").write_bytes(b'{"schema": 1}\n')
    code = (
        "import sys; from draft_head_fp8.archive import Archive; a = Archive(sys.argv[1]); "
        "b = a.begin_boot(); b.add_bytes('receipts/r.json', b'{}'); m = b.seal(); "
        "j = a.join_boot('tp-launch', expected_files=['receipts/r0.json']); "
        "j.add_bytes('receipts/r0.json', b'{}'); assert j.seal_if_complete(); "
        "heavy = [x for x in ('jsonschema', 'torch', 'vllm') if x in sys.modules]; "
        "print(m['chain_index'], b.seq, heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(arc.root)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "3", "[]"]


def test_damaged_prune_record_is_named(arc):
    sealed_boot(arc)
    kept = sealed_boot(arc)
    record = Path(arc.prune(1).record)
    doc = json.loads(record.read_bytes())
    doc["boots"][0]["seq"] = 0
    record.write_bytes(_encode_json(doc))
    report = arc.verify()
    # Without a valid record, the kept boot's link to the pruned one is a deletion as well.
    assert problem_paths(report) == [str(record), str(kept.path / "MANIFEST.json")]
    assert report.problems[0].message.startswith(
        "invalid prune record: boots/0/seq: 0 is less than"
    )


def test_stray_entry_in_root_is_named(arc):
    sealed_boot(arc)
    (arc.root / "notes.txt").write_text("hi")
    report = arc.verify()
    assert problem_paths(report) == [str(arc.root / "notes.txt")]


# ------------------------------------------------------------------- incomplete boots, the chain


def test_incomplete_boot_is_listed_and_does_not_break_the_chain(arc):
    a = sealed_boot(arc)
    crashed = arc.begin_boot()
    crashed.add_bytes("receipts/partial.json", b"{")
    c = sealed_boot(arc)
    assert [(b.seq, b.status) for b in arc.boots()] == [
        (1, "sealed"),
        (2, "incomplete"),
        (3, "sealed"),
    ]
    report = arc.verify()
    assert report.ok and report.incomplete == [crashed.name] and report.chain == [a.name, c.name]
    assert c.manifest["previous_boot"] == a.name


def test_chain_follows_seal_order_not_sequence_order(arc):
    early, late = arc.begin_boot(), arc.begin_boot()
    late.seal()
    early.seal()
    report = arc.verify()
    assert report.ok and report.chain == [late.name, early.name]
    assert early.manifest["previous_boot"] == late.name


def test_boot_opened_by_another_handle_can_be_filled_and_sealed(arc):
    boot = arc.begin_boot()
    other = Archive(arc.root).find(
        boot.launch_id
    )  # e.g. the worker process that captures the receipt
    other.add_bytes("receipts/post_share-rank0.json", b"{}")
    other.seal()
    assert boot.status == "sealed" and arc.verify().ok


def test_seal_notices_a_file_changed_after_it_was_written(arc):
    boot = arc.begin_boot()
    boot.add_bytes("receipts/r.json", b"{}")
    (boot.path / "receipts/r.json").write_bytes(b"{1}")
    with pytest.raises(ArchiveError, match="changed on disk"):
        boot.seal()


# ----------------------------------------------------------------------------------- ENOSPC


def test_enospc_mid_write_gives_a_clear_error_and_keeps_earlier_boots(arc, monkeypatch):
    earlier = sealed_boot(arc)
    boot = arc.begin_boot()
    real_write_all = durable._write_all

    def half_then_enospc(fd, data):
        real_write_all(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(durable, "_write_all", half_then_enospc)
    with pytest.raises(ArchiveError, match="no space left") as info:
        boot.add_bytes("diagnostics/server.log", b"x" * 10000)
    assert "server.log" in str(info.value)
    assert not (boot.path / "diagnostics/server.log").exists()  # never a partial file
    with pytest.raises(ArchiveError, match="no space left"):
        boot.seal()
    monkeypatch.undo()
    assert boot.status == "incomplete"
    report = arc.verify()
    assert report.ok and report.chain == [earlier.name] and report.incomplete == [boot.name]
    boot.add_bytes("diagnostics/server.log", b"fits now")
    boot.seal()
    assert arc.verify().ok


def test_enospc_from_os_write_in_begin_boot(arc, monkeypatch):
    earlier = sealed_boot(arc)

    def no_space(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "write", no_space)
        with pytest.raises(ArchiveError, match="no space left"):
            arc.begin_boot()
    report = arc.verify()
    assert report.ok and report.chain == [earlier.name] and len(report.incomplete) == 1


# ----------------------------------------------------------------------------------- prune


def test_prune_deletes_oldest_sealed_only_and_keeps_verifying(arc):
    sealed = [sealed_boot(arc) for _ in range(3)]
    crashed = arc.begin_boot()
    sealed += [sealed_boot(arc) for _ in range(2)]
    dry = arc.prune(2, dry_run=True)
    assert dry.pruned == [b.name for b in sealed[:3]] and all(b.path.exists() for b in sealed)
    result = arc.prune(2)
    assert result.pruned == [b.name for b in sealed[:3]]
    assert result.kept_sealed == [b.name for b in sealed[3:]] and result.incomplete == [
        crashed.name
    ]
    assert crashed.path.exists() and not any(b.path.exists() for b in sealed[:3])
    assert Path(result.record).name.startswith("PRUNED-")
    report = arc.verify()
    assert report.ok and report.chain == [b.name for b in sealed[3:]]
    after = sealed_boot(arc)
    assert after.seq == 7
    assert arc.prune(5).pruned == []
    # Prune everything; the next boot still links to the last pruned manifest and numbers go on.
    arc.prune(0)
    assert [b.name for b in arc.boots()] == [crashed.name]
    nxt = sealed_boot(arc)
    assert (
        nxt.seq == 8
        and nxt.manifest["previous_boot"] == after.name
        and nxt.manifest["chain_index"] == 6
    )
    assert arc.verify().ok


def test_prune_follows_chain_order(arc):
    early, late = arc.begin_boot(), arc.begin_boot()
    late.seal()
    early.seal()
    assert arc.prune(1).pruned == [late.name]
    assert arc.verify().ok


def test_prune_refuses_a_damaged_archive(arc):
    boot = sealed_boot(arc)
    sealed_boot(arc)
    (boot.path / "diagnostics/server.log").write_bytes(b"tampered")
    with pytest.raises(ArchiveError, match="does not verify"):
        arc.prune(0)
    assert boot.path.exists()


def test_interrupted_prune_leftovers_are_harmless(arc):
    a = sealed_boot(arc)
    sealed_boot(arc)
    # As if prune had written its record and hidden the folder, then died before deleting it.
    arc.prune(1, dry_run=True)
    result = arc.prune(1)
    hidden = arc.root / (".pruned-" + a.name)
    hidden.mkdir()
    (hidden / "boot.json").write_bytes(b"{}")
    report = arc.verify()
    assert report.ok and any(".pruned-" in n for n in report.notes)
    arc.prune(1)
    assert not hidden.exists() and result.pruned == [a.name]


# ----------------------------------------------------------------------------------- diff


def test_diff_lists_receipt_fields_important_first(arc):
    a = sealed_boot(arc)
    changed = dict(
        RECEIPT,
        head_kernel="CutlassFp8",
        head_weight={"dtype": "torch.bfloat16", "shape": [64, 512]},
        zeta="new",
    )
    b = sealed_boot(arc, receipt=changed, extra={"device_names": ["NVIDIA H200"]})
    result = diff_boots(a, b)
    (receipt,) = result["receipts"]
    keys = [c["key"] for c in receipt["changes"]]
    assert keys == ["head_kernel", "head_weight.dtype", "zeta"]
    assert receipt["changes"][2]["in_a"] is False
    ident_keys = [c["key"] for c in result["identity"]]
    assert ident_keys[0] == "device_names" and "launch_id" in ident_keys
    assert ident_keys.index("launch_id") > ident_keys.index("device_names")


# ------------------------------------------------------------------------------------ CLI


def cli(capsys, *argv):
    parser = argparse.ArgumentParser(prog="draft-head-fp8")
    add_archive_parser(parser.add_subparsers(dest="command", required=True))
    try:
        code = run_archive(parser.parse_args(["archive", *map(str, argv)]))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_empty_archive_lists_nothing(arc, capsys):
    assert cli(capsys, "list", "--root", arc.root)[:2] == (0, "")
    code, out, _ = cli(capsys, "list", "--root", arc.root, "--json")
    assert (code, json.loads(out)) == (0, [])
    code, out, _ = cli(capsys, "verify", "--root", arc.root, "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_cli_list_show_verify_diff_prune(arc, capsys):
    a = sealed_boot(arc)
    crashed = arc.begin_boot()
    b = sealed_boot(arc, receipt=dict(RECEIPT, head_method="Other"))
    root = arc.root

    code, out, _ = cli(capsys, "list", "--root", root)
    assert code == 0 and crashed.launch_id in out and "incomplete" in out
    code, out, _ = cli(capsys, "list", "--root", root, "--json")
    assert code == 0 and [r["status"] for r in json.loads(out)] == [
        "sealed",
        "incomplete",
        "sealed",
    ]

    code, out, _ = cli(capsys, "show", "-1", "--root", root, "--json")
    shown = json.loads(out)
    assert (
        code == 0
        and shown["boot"]["boot"] == b.name
        and shown["manifest"]["previous_boot"] == a.name
    )
    code, out, _ = cli(capsys, "show", crashed.launch_id, "--root", root)
    assert code == 0 and "incomplete" in out

    code, out, _ = cli(capsys, "verify", "--root", root)
    assert code == 0 and "verify: ok" in out and crashed.name in out

    code, out, _ = cli(capsys, "diff", "1", "-1", "--root", root)
    assert code == 0 and 'head_method: "Fp8PerTensorOnlineLinearMethod" -> "Other"' in out
    code, out, _ = cli(capsys, "diff", "1", "-1", "--root", root, "--json", "--exit-code")
    assert code == 1 and json.loads(out)["receipts"][0]["changes"][0]["key"] == "head_method"

    code, out, _ = cli(capsys, "prune", "--keep", "1", "--root", root, "--json")
    assert code == 0 and json.loads(out)["pruned"] == [a.name]
    code, out, _ = cli(capsys, "verify", "--root", root, "--json")
    assert code == 0 and json.loads(out)["chain"] == [b.name]


def test_cli_verify_exits_1_and_prints_every_problem(arc, capsys):
    a, b = sealed_boot(arc), sealed_boot(arc)
    (a.path / "diagnostics/server.log").write_bytes(b"tampered!!!!!!!")
    (b.path / "receipts/new.json").write_bytes(b"{}")
    code, out, _ = cli(capsys, "verify", "--root", arc.root)
    assert code == 1
    assert (
        str(a.path / "diagnostics/server.log") in out and str(b.path / "receipts/new.json") in out
    )
    assert "FAILED, 2 problem(s)" in out
    code, out, _ = cli(capsys, "verify", "--root", arc.root, "--json")
    assert code == 1 and len(json.loads(out)["problems"]) == 2
    code, _, err = cli(capsys, "prune", "--keep", "0", "--root", arc.root)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "verify" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "42"],
        ["show", "-5"],
        ["show", "no-such-launch"],
        ["diff", "1", "9"],
        ["prune", "--keep", "-1"],
    ],
)
def test_cli_bad_input_exits_2_with_one_line(arc, capsys, argv):
    sealed_boot(arc)
    code, out, err = cli(capsys, *argv, "--root", arc.root)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "error" in err


def test_cli_missing_root_and_usage_errors(tmp_path, capsys):
    code, _, err = cli(capsys, "list", "--root", tmp_path / "nope")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--root" in err
    assert not (tmp_path / "nope").exists()
    code, _, err = cli(capsys, "show", "--root", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("sub", ["list", "show", "verify", "diff", "prune"])
def test_cli_help_has_an_example(capsys, sub):
    code, out, _ = cli(capsys, sub, "--help")
    assert code == 0 and "example" in out and f"draft-head-fp8 archive {sub}" in out


def test_python_dash_m_runs(arc):
    sealed_boot(arc)
    env = dict(os.environ, DRAFT_HEAD_FP8_ARCHIVE=str(arc.root))
    command = [sys.executable, "-m", "draft_head_fp8.cli", "archive"]
    out = subprocess.run([*command, "verify", "--json"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and json.loads(out.stdout)["ok"]
    out = subprocess.run([*command, "show", "7"], capture_output=True, text=True, env=env)
    assert (
        out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    )
