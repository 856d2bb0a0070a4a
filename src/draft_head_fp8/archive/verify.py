"""verify: every byte of every sealed boot, each manifest against what seal() writes, the chain,
missing and extra files, expected files, and stray entries in the root.

Damage is reported, never repaired: each problem names the path and says what is wrong.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path
from typing import Any

from . import documents
from .chain import PruneRecord, pruned_boots, read_prune_records
from .errors import ArchiveError, InvalidNameError
from .fs import CHUNK, check_name, fd_closing, hash_fd, open_dir, open_file, read_at, read_fd, walk
from .layout import BOOT_JSON, HIDE_PREFIX, MANIFEST, MANIFEST_SCHEMA, encode_json
from .proofs import PROOFS, verify_proofs
from .rootdir import BootEntry, is_sealed, open_root, read_manifest, root_lock, scan
from .verify_chain import SealedBoot, verify_chain
from .verify_report import VerifyReport


def verify(root: Path) -> VerifyReport:
    report = VerifyReport(root=str(root))
    buf = bytearray(CHUNK)
    with fd_closing(open_root(root)) as root_fd:
        # Snapshot under the shared lock, so a seal racing with us is either wholly in or out.
        with root_lock(root_fd, root, exclusive=False):
            listing = scan(root_fd)
            records = read_prune_records(root_fd, root, listing.records)
            _report_prune_records(root, records, report)
            incomplete: list[BootEntry] = []
            snapshot: list[SealedBoot] = []
            for boot in listing.boots:
                if not is_sealed(root_fd, boot):
                    incomplete.append(boot)
                    continue
                try:
                    raw, _ = read_manifest(root_fd, root, boot)
                    snapshot.append(SealedBoot(boot, raw, hashlib.sha256(raw).hexdigest(), None))
                except (OSError, ArchiveError) as exc:
                    report.add(root / boot.name / MANIFEST, f"unreadable manifest: {exc}")
                    snapshot.append(SealedBoot(boot, None, None, None))
        report.incomplete = [b.name for b in incomplete]
        for name, kind in listing.other:
            if name.startswith(HIDE_PREFIX):
                report.notes.append(
                    f"{name}: left by an interrupted prune; the next prune removes it"
                )
            else:
                report.add(
                    root / name, f"unexpected {kind} in the archive root (not a boot folder)"
                )
        seqs: dict[int, list[str]] = {}
        for boot in listing.boots:
            seqs.setdefault(boot.seq, []).append(boot.name)
        for seq, names in seqs.items():
            if len(names) > 1:
                report.add(
                    root / names[0],
                    f"sequence number {seq} is used by {len(names)} boots: {', '.join(names)}",
                )
        for item in snapshot:
            report.sealed.append(item.boot.name)
            try:
                _verify_sealed(root_fd, root, item, report, buf)
            except (OSError, ArchiveError) as exc:
                report.add(root / item.boot.name, f"cannot be read: {exc}")
        for boot in incomplete:
            try:
                _verify_incomplete(root_fd, root, boot, report)
            except (OSError, ArchiveError) as exc:
                report.add(root / boot.name, f"cannot be read: {exc}")
    verify_chain(root, snapshot, pruned_boots(records), report)
    return report


def _report_prune_records(root: Path, records: list[PruneRecord], report: VerifyReport) -> None:
    for record in records:
        if record.unreadable is not None:
            report.add(root / record.name, f"unreadable prune record: {record.unreadable}")
        elif not record.valid:
            errors = documents.explain_pruned(record.doc)
            report.add(root / record.name, "invalid prune record: " + "; ".join(errors))


def _verify_incomplete(root_fd: int, root: Path, boot: BootEntry, report: VerifyReport) -> None:
    path = root / boot.name
    present = set()
    with fd_closing(open_dir(root_fd, boot.name, str(path))) as bfd:
        for rel, _, _, st in walk(bfd):
            if stat.S_ISREG(st.st_mode):
                present.add(rel)
            elif not stat.S_ISDIR(st.st_mode):
                report.add(path / rel, "symlink or special file in a boot (never followed)")
        if BOOT_JSON not in present:
            return  # a crash before boot.json: nothing is expected, and nothing claimed
        try:
            identity = documents.load_json(read_at(bfd, BOOT_JSON, str(path / BOOT_JSON)))
            expected = documents.expected_files_of(identity if isinstance(identity, dict) else {})
        except (ValueError, RecursionError) as exc:
            report.add(
                path / BOOT_JSON,
                f"cannot tell which files this boot expects ({exc}); it can never be sealed",
            )
            return
    if expected is not None:
        report.expected[boot.name] = {
            "present": [f for f in expected if f in present],
            "missing": [f for f in expected if f not in present],
        }


def _verify_sealed(
    root_fd: int, root: Path, item: SealedBoot, report: VerifyReport, buf: bytearray
) -> None:
    boot = item.boot
    if item.raw is None:
        return
    manifest = _check_manifest(root, item.raw, boot, report)
    item.manifest = manifest
    listed = {}
    if manifest is not None:
        listed = {f["path"]: f for f in manifest["files"]}
    base = f"{root}/{boot.name}/"
    identity_raw = None  # boot.json's bytes, once they match the manifest
    with fd_closing(open_dir(root_fd, boot.name, base)) as bfd:
        seen = set()
        for rel, dfd, leaf, st in walk(bfd):
            shown = base + rel
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                report.add(shown, "symlink or special file in a sealed boot (never followed)")
                continue
            if rel == MANIFEST or rel.startswith(PROOFS + "/"):
                continue  # later proofs hang off the sealed boot: checked below, by their records
            seen.add(rel)
            entry = listed.get(rel)
            if entry is None:
                if manifest is not None:
                    report.add(shown, f"file is not in {MANIFEST} (added after the seal?)")
                continue
            data = _check_listed_file(shown, rel, (dfd, leaf, st), entry, report, buf)
            if data is not None:
                identity_raw = data
        if manifest is not None:
            verify_proofs(bfd, base, item.raw, report, buf)
    for rel in sorted(set(listed) - seen):
        report.add(base + rel, f"listed in {MANIFEST} but missing")
    if identity_raw is not None:
        _check_expected_sealed(base, identity_raw, listed, report)


def _check_listed_file(
    shown: str,
    rel: str,
    found: tuple[int, str, Any],
    entry: dict[str, Any],
    report: VerifyReport,
    buf: bytearray,
) -> bytes | None:
    """One file of a sealed boot against its manifest entry: its size, then every byte.
    ``found`` is where ``walk`` found it (folder fd, name, stat). Returns boot.json's bytes when
    they match (it is small and read anyway: its expected files are checked next)."""
    dfd, leaf, st = found
    if st.st_size != entry["size"]:
        report.add(
            shown,
            f"size {st.st_size} bytes, {MANIFEST} says {entry['size']} (truncated or appended)",
        )
        return None
    data = None
    with fd_closing(open_file(dfd, leaf, shown)) as ffd:
        if rel == BOOT_JSON:
            data = read_fd(ffd)
            size, digest = len(data), hashlib.sha256(data).hexdigest()
        else:
            size, digest = hash_fd(ffd, buf)
    report.files_checked += 1
    report.bytes_checked += size
    if size != entry["size"] or digest != entry["sha256"]:
        report.add(
            shown,
            f"content differs from {MANIFEST}: SHA-256 {digest}, expected {entry['sha256']}",
        )
        return None
    return data


def _check_expected_sealed(
    base: str, identity_raw: bytes, listed: dict[str, Any], report: VerifyReport
) -> None:
    try:
        identity = documents.load_json(identity_raw)
        expected = documents.expected_files_of(identity if isinstance(identity, dict) else {})
    except (ValueError, RecursionError) as exc:
        report.add(base + BOOT_JSON, f"cannot tell which files this boot expects ({exc})")
        return
    missing = [f for f in expected or () if f not in listed]
    if missing:
        report.add(
            base + MANIFEST,
            f"sealed without {', '.join(missing)}, which {BOOT_JSON} "
            "expects (a rank's files are missing from the proof)",
        )


def _check_manifest(
    root: Path, raw: bytes, boot: BootEntry, report: VerifyReport
) -> dict[str, Any] | None:
    """Parsed manifest when it is exactly what seal() would have written, else None + problems."""
    mpath = root / boot.name / MANIFEST
    try:
        doc = documents.load_json(raw)
    except (ValueError, RecursionError) as exc:
        report.add(mpath, f"not valid JSON ({exc.__class__.__name__}: {exc}); damaged or truncated")
        return None
    family = MANIFEST_SCHEMA.rsplit("/", 1)[0]
    major = documents.schema_major(doc.get("schema") if isinstance(doc, dict) else None, family)
    if major is not None and major != 1:
        report.add(mpath, f"unknown manifest schema {doc['schema']!r}; this version reads v1 only")
        return None
    if not documents.manifest_ok(doc):
        report.add(mpath, "invalid manifest: " + "; ".join(documents.explain_manifest(doc)[:5]))
        return None
    problems = []
    if raw != encode_json(doc):
        problems.append(
            "bytes differ from the canonical form seal() writes (edited by hand or damaged)"
        )
    if documents.self_digest(doc) != doc["manifest_sha256"]:
        problems.append("manifest_sha256 does not match the manifest's content (damaged or edited)")
    if (doc["boot"], doc["seq"], doc["launch_id"]) != (boot.name, boot.seq, boot.launch_id):
        problems.append(f"belongs to boot {doc['boot']!r}, not to the folder it is in")
    if (doc["previous"] is None) != (doc["previous_boot"] is None):
        problems.append("previous and previous_boot must both be set or both be null")
    paths = [f["path"] for f in doc["files"]]
    if len(set(paths)) != len(paths):
        problems.append("lists a file twice")
    for p in paths:
        try:
            check_name(p)
        except InvalidNameError as exc:
            problems.append(f"lists an unsafe name: {exc}")
    if BOOT_JSON not in paths:
        problems.append(f"does not list {BOOT_JSON}")
    for p in problems:
        report.add(mpath, p)
    return None if problems else doc
