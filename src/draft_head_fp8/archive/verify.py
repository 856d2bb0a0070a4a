"""verify: every byte of every sealed boot, each manifest against what seal() writes, the chain,
missing and extra files, expected files, and stray entries in the root.

Damage is reported, never repaired: each problem names the path and says what is wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import stat
from pathlib import Path
from typing import Any

from . import documents
from .chain import PruneRecord, pruned_boots, read_prune_records
from .errors import ArchiveError, InvalidNameError
from .fs import CHUNK, check_name, fd_closing, hash_fd, open_dir, open_file, read_at, read_fd, walk
from .layout import BOOT_JSON, HIDE_PREFIX, MANIFEST, MANIFEST_SCHEMA, encode_json
from .rootdir import BootEntry, is_sealed, open_root, read_manifest, root_lock, scan


@dataclasses.dataclass
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class VerifyReport:
    root: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    sealed: list[str] = dataclasses.field(default_factory=list)
    incomplete: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    files_checked: int = 0
    bytes_checked: int = 0
    chain: list[str] = dataclasses.field(default_factory=list)  # sealed boots in chain (seal) order
    # Incomplete boots that wait for expected files (join_boot): name -> present and missing ones.
    expected: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: str | Path, message: str) -> None:
        self.problems.append(Problem(str(path), message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "root": self.root,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "sealed": self.sealed,
            "incomplete": self.incomplete,
            "chain": self.chain,
            "notes": self.notes,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "expected": self.expected,
        }


@dataclasses.dataclass
class _Sealed:
    boot: BootEntry
    raw: bytes | None
    digest: str | None
    manifest: dict[str, Any] | None  # None when unreadable or invalid


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
            snapshot: list[_Sealed] = []
            for boot in listing.boots:
                if not is_sealed(root_fd, boot):
                    incomplete.append(boot)
                    continue
                try:
                    raw, _ = read_manifest(root_fd, root, boot)
                    snapshot.append(_Sealed(boot, raw, hashlib.sha256(raw).hexdigest(), None))
                except (OSError, ArchiveError) as exc:
                    report.add(root / boot.name / MANIFEST, f"unreadable manifest: {exc}")
                    snapshot.append(_Sealed(boot, None, None, None))
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
    _verify_chain(root, snapshot, pruned_boots(records), report)
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
    root_fd: int, root: Path, item: _Sealed, report: VerifyReport, buf: bytearray
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
            if rel == MANIFEST:
                continue
            seen.add(rel)
            entry = listed.get(rel)
            if entry is None:
                if manifest is not None:
                    report.add(shown, f"file is not in {MANIFEST} (added after the seal?)")
                continue
            if st.st_size != entry["size"]:
                report.add(
                    shown,
                    f"size {st.st_size} bytes, {MANIFEST} says {entry['size']} "
                    "(truncated or appended)",
                )
                continue
            with fd_closing(open_file(dfd, leaf, shown)) as ffd:
                if rel == BOOT_JSON:  # small, and read anyway: keep it for the expected files
                    data = read_fd(ffd)
                    size, digest = len(data), hashlib.sha256(data).hexdigest()
                else:
                    size, digest = hash_fd(ffd, buf)
            report.files_checked += 1
            report.bytes_checked += size
            if size != entry["size"] or digest != entry["sha256"]:
                report.add(
                    shown,
                    f"content differs from {MANIFEST}: SHA-256 {digest}, expected "
                    f"{entry['sha256']}",
                )
            elif rel == BOOT_JSON:
                identity_raw = data
    for rel in sorted(set(listed) - seen):
        report.add(base + rel, f"listed in {MANIFEST} but missing")
    if identity_raw is not None:
        _check_expected_sealed(base, identity_raw, listed, report)


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


def _verify_chain(
    root: Path, snapshot: list[_Sealed], pruned: dict[str, dict[str, Any]], report: VerifyReport
) -> None:
    by_digest = {s.digest: s for s in snapshot if s.digest}
    by_name = {s.boot.name: s for s in snapshot}
    successors: dict[str, list[_Sealed]] = {}
    starts: list[_Sealed] = []
    for s in snapshot:
        m = s.manifest
        if m is None:
            continue
        mpath = root / s.boot.name / MANIFEST
        prev, idx = m["previous"], m["chain_index"]
        if prev is None:
            if idx != 0:
                report.add(mpath, f"chain_index is {idx} but there is no previous manifest")
            starts.append(s)
        elif prev in by_digest:
            p = by_digest[prev]
            successors.setdefault(prev, []).append(s)
            if m["previous_boot"] != p.boot.name:
                report.add(
                    mpath,
                    f"previous_boot says {m['previous_boot']!r} but the linked "
                    f"manifest is {p.boot.name}'s",
                )
            if p.manifest is not None and idx != p.manifest["chain_index"] + 1:
                report.add(
                    mpath,
                    f"chain_index {idx} does not follow {p.boot.name}'s "
                    f"{p.manifest['chain_index']}",
                )
        elif prev in pruned:
            rec = pruned[prev]
            starts.append(s)
            if m["previous_boot"] != rec["boot"] or idx != rec["chain_index"] + 1:
                report.add(
                    mpath,
                    f"does not match the prune record of {rec['boot']} (chain index "
                    f"{rec['chain_index']})",
                )
        else:
            named = by_name.get(m["previous_boot"])
            if named is not None:
                report.add(
                    root / named.boot.name / MANIFEST,
                    f"changed after {s.boot.name} was sealed: its SHA-256 is "
                    f"{named.digest}, {s.boot.name} recorded {prev}",
                )
            else:
                report.add(
                    mpath,
                    f"previous boot {m['previous_boot']} (manifest {prev[:16]}...) "
                    "is gone and no prune record covers it: a sealed boot was deleted",
                )
    for prev, succ in successors.items():
        if len(succ) > 1:
            report.add(
                root / by_digest[prev].boot.name / MANIFEST,
                f"chain forks here: {', '.join(x.boot.name for x in succ)} all link to it",
            )
    if len(starts) > 1:
        report.add(
            root,
            f"the chain has {len(starts)} starts "
            f"({', '.join(x.boot.name for x in starts)}); boots were removed from its "
            "middle or sealed without the lock",
        )
    # Chain order for the report: walk from the start along single successors.
    order, cur = [], starts[0] if len(starts) == 1 else None
    while cur is not None and len(order) <= len(snapshot):
        order.append(cur.boot.name)
        nxt = successors.get(cur.digest or "", [])
        cur = nxt[0] if len(nxt) == 1 else None
    report.chain = order
