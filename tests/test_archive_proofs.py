"""A boot's later proofs (archive/proofs.py): after a weight update each re-proof is one more
write-once record in the same boot, numbered, chained to the records before it, sealed as it is
written; the boot sealed at start-up stays byte-identical, and verify catches a record altered,
one missing between others, a file added after a seal and a broken link."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from draft_head_fp8.archive import Archive, ArchiveError
from draft_head_fp8.archive.proofs import (
    RECORD,
    begin_proof,
    list_proofs,
    next_number,
    proof_folder,
)
from draft_head_fp8.archive.prune import prune

RANK0 = "receipts/post_update-rank0.json"
RANK1 = "receipts/post_update-rank1.json"


def _sealed_boot(arc):
    boot = arc.begin_boot(launch_id="vllm-proofs")
    boot.add_bytes("receipts/post_share-rank0.json", b'{"start": true}\n')
    boot.seal()
    return boot


def _tree(path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not str(p.relative_to(path)).startswith("proofs")
    }


def _prove(boot, number, *files, update=None):
    proof = begin_proof(boot, number, expected_files=list(files), update=update or {"n": number})
    for name in files:
        proof.add_bytes(name, json.dumps({"proof": number, "file": name}).encode() + b"\n")
    return proof, proof.seal_if_complete()


def test_each_proof_is_sealed_as_written_and_chained_and_the_boot_never_changes(quiet_env, arc):
    boot = _sealed_boot(arc)
    before = _tree(boot.path)
    assert next_number(boot) == 1
    _, first = _prove(boot, 1, RANK0, update={"kind": "reload_weights"})
    assert first["previous_record"] == "MANIFEST.json"
    assert first["previous"] == hashlib.sha256(boot.read_bytes("MANIFEST.json")).hexdigest()
    _, second = _prove(boot, 2, RANK0)
    raw_first = boot.read_bytes(f"{proof_folder(1)}/{RECORD}")
    assert second["previous_record"] == f"{proof_folder(1)}/{RECORD}"
    assert second["previous"] == hashlib.sha256(raw_first).hexdigest()
    assert _tree(boot.path) == before  # the start-up boot, byte for byte
    listed = list_proofs(boot)
    assert [(p["proof"], p["status"]) for p in listed] == [(1, "sealed"), (2, "sealed")]
    assert listed[0]["update"] == {"kind": "reload_weights"} and RANK0 in listed[0]["files"]
    assert next_number(boot) == 3
    report = arc.verify()
    assert report.ok, report.problems


def test_ranks_join_one_proof_and_the_last_one_seals_it(quiet_env, arc):
    boot = _sealed_boot(arc)
    rank0 = begin_proof(boot, 1, expected_files=[RANK0, RANK1], update={"kind": "transfer"})
    rank1 = begin_proof(boot, 1, expected_files=[RANK0, RANK1], update={"kind": "transfer"})
    rank0.add_bytes(RANK0, b"{}\n")
    assert rank0.seal_if_complete() is None  # rank 1's receipt is not there yet
    rank1.add_bytes(RANK1, b"{}\n")
    assert rank1.seal_if_complete() is not None
    with pytest.raises(ArchiveError, match="is sealed"):
        rank0.add_bytes("receipts/late.json", b"{}\n")
    # Another update cannot take a number that is already taken.
    with pytest.raises(ArchiveError, match="another update's"):
        begin_proof(boot, 1, expected_files=[RANK0], update={"kind": "other"})
    assert arc.verify().ok


def test_a_proof_needs_a_sealed_boot(quiet_env, arc):
    boot = arc.begin_boot(launch_id="vllm-open")
    with pytest.raises(ArchiveError, match="not sealed"):
        begin_proof(boot, 1, expected_files=[RANK0], update={})


@pytest.mark.parametrize(
    "damage, found",
    [
        ("alter", "content differs from PROOF.json"),
        ("remove a middle proof", "proof 1 is missing between the boot's later proofs"),
        ("remove a middle record", "its link to proofs/0001/PROOF.json does not hold"),
        ("add after the seal", "is not in PROOF.json (added after the seal?)"),
        ("edit the record", "bytes or proof_sha256 differ"),
        ("stray folder", "not a proof folder"),
    ],
)
def test_verify_catches_every_damage_to_the_later_proofs(quiet_env, arc, damage, found):
    boot = _sealed_boot(arc)
    _prove(boot, 1, RANK0)
    _prove(boot, 2, RANK0)
    first = boot.path / proof_folder(1)
    if damage == "alter":
        (first / RANK0).chmod(0o600)
        (first / RANK0).write_bytes(b'{"proof": 9}\n')
    elif damage == "remove a middle proof":
        shutil.rmtree(first)
    elif damage == "remove a middle record":
        os.unlink(first / RECORD)
    elif damage == "add after the seal":
        (first / "receipts" / "extra.json").write_bytes(b"{}\n")
    elif damage == "edit the record":
        record = json.loads((first / RECORD).read_text())
        record["sealed_at"] = "2000-01-01T00:00:00Z"
        (first / RECORD).chmod(0o600)
        (first / RECORD).write_text(json.dumps(record))
    elif damage == "stray folder":
        (boot.path / "proofs" / "notes").mkdir()
    report = arc.verify()
    assert not report.ok
    assert any(found in p.message for p in report.problems), report.problems


def test_a_proof_that_never_sealed_is_its_own_kind_of_problem_and_says_what_it_lost(quiet_env, arc):
    boot = _sealed_boot(arc)
    begin_proof(boot, 1, expected_files=[RANK0], update={"kind": "end_of_serving"})
    assert [p["status"] for p in list_proofs(boot)] == ["incomplete"]
    report = Archive(arc.root).verify()
    # Not a damaged file (problems), not "ok" either: what the record held is lost.
    assert not report.ok and report.problems == []
    (lost,) = report.incomplete_proofs
    assert lost.path.endswith("proofs/0001")
    assert lost.message == (
        "proof 1 is incomplete: never sealed (no PROOF.json: the engine stopped while writing "
        f"it, a kill or a crash); update kind end_of_serving; lost: {RANK0} "
        "(1 of 2 files present)"
    )
    assert report.to_dict()["incomplete_proofs"] == [{"path": lost.path, "message": lost.message}]
    # The next proof links past it to the boot's manifest: nothing it did not seal is vouched for.
    _, second = _prove(boot, 2, RANK0)
    assert second["previous_record"] == "MANIFEST.json"
    again = arc.verify()
    assert again.problems == [] and [p.message for p in again.incomplete_proofs] == [lost.message]
    # Pruning is not blocked by it: it goes with its boot.
    assert prune(arc.root, keep=1).kept_sealed


def test_a_proof_folder_left_empty_lost_the_whole_record(quiet_env, arc):
    boot = _sealed_boot(arc)
    (boot.path / "proofs" / "0001").mkdir(parents=True)
    (lost,) = arc.verify().incomplete_proofs
    assert lost.message.endswith("lost: the whole record (no update.json)")
