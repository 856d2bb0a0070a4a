"""A boot's later proofs: after a weight update the plugin proves the draft head again, and each
such proof is one more write-once record in the same boot, numbered, chained to the boot's
earlier records and sealed as it is written. The boot sealed at start-up is never touched: its
MANIFEST.json does not list ``proofs/``, and the records hang off it.

Layout inside a sealed boot::

    proofs/0001/update.json          what changed and how the engine learned of it (first rank)
    proofs/0001/receipts/...          each rank's receipt of the head as re-proven
    proofs/0001/diagnostics/...       each rank's diagnostics (and the cross-rank record)
    proofs/0001/PROOF.json            written last: files, sizes, SHA-256, link to the record before

Proof N links to the newest sealed record before it: proof N-1's PROOF.json, or the boot's
MANIFEST.json for the first, by the SHA-256 of its bytes. Verify walks the records in order: a
number missing between two records, a record altered, a file added after its seal or a link that
does not hold is reported. (Like any append-only log without an outside anchor, removing the
newest records whole leaves no trace; an incomplete record, a crash before its PROOF.json, is
listed, never hidden.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

from draft_head_fp8 import durable

from . import documents
from .errors import ArchiveError, BootIncompleteError
from .fs import (
    CHUNK,
    check_name,
    exists_at,
    fd_closing,
    flock,
    hash_fd,
    open_dir,
    open_file,
    read_at,
    regular_files,
    walk,
    wrap_os_error,
)
from .identity import utc_now
from .layout import DIR_MODE, FILE_MODE, MANIFEST, encode_json
from .verify_report import Problem

PROOFS = "proofs"
RECORD = "PROOF.json"
UPDATE = "update.json"
PROOF_SCHEMA = "draft-head-fp8-archive-proof/v1"
PROOF_SCHEMA_FILE = "archive-proof-v1"
WIDTH = 4


def proof_folder(number: int) -> str:
    return f"{PROOFS}/{number:0{WIDTH}d}"


def _number(name: str) -> int | None:
    return int(name) if len(name) == WIDTH and name.isdigit() and int(name) > 0 else None


class Proof:
    """One later proof of a boot: ranks add their files, the last one seals it."""

    def __init__(self, boot: Any, number: int, expected_files: list[str]) -> None:
        self.boot = boot
        self.number = number
        self.expected_files = expected_files
        self.folder = proof_folder(number)

    @property
    def path(self) -> Any:
        return self.boot.path / self.folder

    @contextlib.contextmanager
    def _dir(self) -> Iterator[int]:
        with self.boot._dir() as bfd, fd_closing(open_dir(bfd, PROOFS, str(self.boot.path))) as p:
            with fd_closing(open_dir(p, self.folder.rsplit("/", 1)[1], str(self.path))) as fd:
                yield fd

    def add_bytes(self, name: str, data: bytes) -> None:
        parts = check_name(name)
        with self._dir() as pfd, flock(pfd, exclusive=False), contextlib.ExitStack() as stack:
            if exists_at(pfd, RECORD):
                raise ArchiveError(f"proof {self.folder} of {self.boot.name} is sealed")
            dfd = pfd
            for part in parts[:-1]:
                _mkdir(dfd, part, str(self.path / part))
                dfd = stack.enter_context(fd_closing(open_dir(dfd, part, str(self.path / part))))
            try:
                durable.create_exclusive_at(dfd, parts[-1], bytes(data), mode=FILE_MODE)
            except OSError as exc:
                raise wrap_os_error(exc, f"writing {self.path / name}") from exc

    def seal_if_complete(self) -> dict | None:
        """Write PROOF.json once every expected file is there (the last rank's call does)."""
        with self._dir() as pfd, flock(pfd, exclusive=True):
            present = {rel for rel, _ in regular_files(pfd)}
            if RECORD in present or any(f not in present for f in self.expected_files):
                return None
            return self._write_record(pfd)

    def seal(self) -> dict:
        record = self.seal_if_complete()
        if record is None:
            raise BootIncompleteError(
                f"cannot seal {self.folder} of {self.boot.name}: files missing or already sealed",
                [],
            )
        return record

    def _write_record(self, pfd: int) -> dict:
        buf = bytearray(CHUNK)
        files = []
        for rel, dfd, leaf, st in walk(pfd):
            if stat.S_ISREG(st.st_mode):
                with fd_closing(open_file(dfd, leaf, str(self.path / rel))) as ffd:
                    size, digest = hash_fd(ffd, buf)
                files.append({"path": rel, "size": size, "sha256": digest})
        files.sort(key=lambda f: f["path"])
        previous_record, previous = _link_before(self.boot, self.number)
        record: dict[str, Any] = {
            "schema": PROOF_SCHEMA,
            "boot": self.boot.name,
            "proof": self.number,
            "sealed_at": utc_now(),
            "previous_record": previous_record,
            "previous": previous,
            "files": files,
        }
        record["proof_sha256"] = _self_digest(record)
        try:
            durable.create_exclusive_at(pfd, RECORD, encode_json(record), mode=FILE_MODE)
        except OSError as exc:
            raise wrap_os_error(exc, f"sealing {self.path}") from exc
        return record


def _self_digest(record: dict) -> str:
    import rfc8785

    body = {k: v for k, v in record.items() if k != "proof_sha256"}
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def _raw(boot: Any, name: str) -> bytes | None:
    try:
        return boot.read_bytes(name)
    except (OSError, ArchiveError):
        return None


def _link_before(boot: Any, number: int) -> tuple[str, str]:
    """(record, sha256 of its bytes): the newest sealed proof below ``number``, else the
    boot's manifest."""
    for earlier in range(number - 1, 0, -1):
        name = f"{proof_folder(earlier)}/{RECORD}"
        raw = _raw(boot, name)
        if raw is not None:
            return name, hashlib.sha256(raw).hexdigest()
    raw = _raw(boot, MANIFEST)
    if raw is None:
        raise ArchiveError(f"boot {boot.name} is not sealed: a later proof needs its manifest")
    return MANIFEST, hashlib.sha256(raw).hexdigest()


def begin_proof(boot: Any, number: int, *, expected_files: list[str], update: dict) -> Proof:
    """Proof ``number`` of a sealed ``boot``, for each rank of the update: the first caller
    creates its folder and writes ``update.json``; the others join it (the same update)."""
    if not boot.sealed:
        raise ArchiveError(
            f"boot {boot.name} is not sealed; later proofs follow a sealed start-up proof"
        )
    expected = [UPDATE, *expected_files]
    proof = Proof(boot, number, expected)
    with boot._dir() as bfd:
        _mkdir(bfd, PROOFS, str(boot.path / PROOFS))
        with fd_closing(open_dir(bfd, PROOFS, str(boot.path / PROOFS))) as pfd:
            _mkdir(pfd, proof.folder.rsplit("/", 1)[1], str(proof.path))
    document = encode_json({"proof": number, "expected_files": expected, "update": update})
    try:
        proof.add_bytes(UPDATE, document)
    except (FileExistsError, ArchiveError) as exc:
        found = _raw(boot, f"{proof.folder}/{UPDATE}")
        if found is None or json.loads(found).get("expected_files") != expected:
            raise ArchiveError(
                f"{proof.folder} of {boot.name} is another update's ({exc}); proofs are numbered "
                "once per update"
            ) from None
    return proof


def _mkdir(dir_fd: int, name: str, shown: str) -> None:
    try:
        os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
        os.fsync(dir_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise wrap_os_error(exc, f"creating {shown}") from exc


def next_number(boot: Any) -> int:
    """The number the next proof of ``boot`` takes: one more than any folder there."""
    return max((p["proof"] for p in list_proofs(boot)), default=0) + 1


def list_proofs(boot: Any) -> list[dict]:
    """The boot's later proofs in order: number, status, the update, when sealed, files."""
    found = []
    try:
        with boot._dir() as bfd:
            if not exists_at(bfd, PROOFS):
                return []
            with fd_closing(open_dir(bfd, PROOFS, str(boot.path / PROOFS))) as pfd:
                names = sorted(os.listdir(pfd))
    except (OSError, ArchiveError):
        return []
    for name in names:
        number = _number(name)
        if number is None:
            continue
        raw_update = _raw(boot, f"{PROOFS}/{name}/{UPDATE}")
        raw_record = _raw(boot, f"{PROOFS}/{name}/{RECORD}")
        update = _loads(raw_update)
        record = _loads(raw_record)
        found.append({
            "proof": number,
            "status": "sealed" if record is not None else "incomplete",
            "update": (update or {}).get("update"),
            "sealed_at": (record or {}).get("sealed_at"),
            "files": [f.get("path") for f in (record or {}).get("files", [])],
        })  # fmt: skip
    return found


def _loads(raw: bytes | None) -> dict | None:
    if raw is None:
        return None
    try:
        value = documents.load_json(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def verify_proofs(
    bfd: int, base: str, manifest_raw: bytes, report: Any, buf: bytearray
) -> list[int]:
    """Every later proof of a sealed boot (``bfd``: its folder), against its record and the chain
    of records; problems go to ``report``. Returns the sealed proofs' numbers."""
    if not exists_at(bfd, PROOFS):
        return []
    sealed: list[int] = []
    with fd_closing(open_dir(bfd, PROOFS, base + PROOFS)) as pfd:
        entries = sorted(os.listdir(pfd))
        numbers = []
        for name in entries:
            number = _number(name)
            if number is None:
                report.add(base + f"{PROOFS}/{name}", "not a proof folder (proofs/NNNN)")
            else:
                numbers.append(number)
        for missing in sorted(set(range(1, max(numbers, default=0) + 1)) - set(numbers)):
            report.add(
                base + proof_folder(missing),
                f"proof {missing} is missing between the boot's later proofs (removed?)",
            )
        raws = {MANIFEST: manifest_raw}
        for number in numbers:
            folder = proof_folder(number)
            with fd_closing(open_dir(pfd, folder.rsplit("/", 1)[1], base + folder)) as fd:
                raw = _verify_one(fd, base + folder + "/", number, raws, report, buf)
            if raw is not None:
                raws[f"{folder}/{RECORD}"] = raw
                sealed.append(number)
    return sealed


def _verify_one(
    fd: int, base: str, number: int, raws: dict, report: Any, buf: bytearray
) -> bytes | None:
    if not exists_at(fd, RECORD):
        report.incomplete_proofs.append(Problem(base.rstrip("/"), _lost(fd, base, number)))
        return None
    raw = read_at(fd, RECORD, base + RECORD)
    record = _loads(raw)
    problems = []
    if record is None or not _schemas().is_valid(PROOF_SCHEMA_FILE, record):
        report.add(base + RECORD, "invalid proof record")
        return None
    if raw != encode_json(record) or _self_digest(record) != record["proof_sha256"]:
        problems.append("bytes or proof_sha256 differ from what the seal wrote (edited or damaged)")
    if record["proof"] != number:
        problems.append(f"says proof {record['proof']}, in the folder of proof {number}")
    linked = raws.get(record["previous_record"])
    if linked is None or hashlib.sha256(linked).hexdigest() != record["previous"]:
        problems.append(
            f"its link to {record['previous_record']} does not hold (that record is missing, "
            "altered, or not the one it was sealed after)"
        )
    expected_link = max((k for k in raws if k != MANIFEST), default=MANIFEST)
    if record["previous_record"] != expected_link:
        problems.append(f"links to {record['previous_record']}, not to {expected_link}")
    listed = {f["path"]: f for f in record["files"]}
    seen = set()
    for rel, dfd, leaf, st in walk(fd):
        if stat.S_ISDIR(st.st_mode) or rel == RECORD:
            continue
        seen.add(rel)
        entry = listed.get(rel)
        if entry is None or not stat.S_ISREG(st.st_mode):
            problems.append(f"{rel} is not in {RECORD} (added after the seal?)")
            continue
        with fd_closing(open_file(dfd, leaf, base + rel)) as ffd:
            size, digest = hash_fd(ffd, buf)
        report.files_checked += 1
        report.bytes_checked += size
        if (size, digest) != (entry["size"], entry["sha256"]):
            problems.append(f"{rel}: content differs from {RECORD}")
    problems += [f"{rel} is listed in {RECORD} but missing" for rel in sorted(set(listed) - seen)]
    for problem in problems:
        report.add(base + RECORD, problem)
    return raw


def _lost(fd: int, base: str, number: int) -> str:
    """What an unsealed record lost: the files its ``update.json`` expected and never got."""
    present = {rel for rel, _ in regular_files(fd)}
    head = (
        f"proof {number} is incomplete: never sealed (no {RECORD}: the engine stopped while "
        "writing it, a kill or a crash); "
    )
    if UPDATE not in present:
        return head + f"lost: the whole record (no {UPDATE})"
    document = _loads(read_at(fd, UPDATE, base + UPDATE)) or {}
    expected = document.get("expected_files") or []
    missing = [f for f in expected if f not in present]
    kind = (document.get("update") or {}).get("kind") or "unknown"
    return head + (
        f"update kind {kind}; lost: {', '.join(missing) or 'only the seal'} "
        f"({len(present)} of {len(expected)} files present)"
    )


def _schemas() -> Any:
    from .. import schemas

    return schemas
