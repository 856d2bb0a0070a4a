"""The chain of sealed boots: its head, the link a new manifest records, and the prune records
that keep it verifiable across a cut.

Each manifest records the SHA-256 of the previous sealed boot's MANIFEST.json bytes. Chain order is
seal order, not sequence order (a boot may seal long after a later one began); the root lock
around "find the head + link my manifest" makes it a single line even with concurrent seals.
Only the newest manifest is unprotected by a successor; its own ``manifest_sha256`` (RFC 8785 over
its other fields) plus a byte-exact canonical-form check catches accidental damage to it.

Runs at every seal, at engine start: no jsonschema here (documents.pruned_ok is the fast check).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from . import documents
from .errors import ArchiveError
from .fs import read_at
from .rootdir import Listing, is_sealed, read_manifest


@dataclasses.dataclass(frozen=True)
class ChainHead:
    """The last sealed boot, pruned or not: what the next manifest links to."""

    digest: str  # SHA-256 of its MANIFEST.json bytes
    boot: str  # its folder name
    index: int  # its chain_index


def link_fields(head: ChainHead | None) -> dict[str, Any]:
    """The chain fields of the manifest sealed after ``head`` (None: the chain's first)."""
    if head is None:
        return {"chain_index": 0, "previous": None, "previous_boot": None}
    return {"chain_index": head.index + 1, "previous": head.digest, "previous_boot": head.boot}


@dataclasses.dataclass(frozen=True)
class PruneRecord:
    """One PRUNED-*.json as read: its document when it parses, and whether it is valid."""

    name: str
    doc: Any
    unreadable: str | None  # why it could not be read or parsed; None when it could
    valid: bool


def read_prune_records(root_fd: int, root: Path, names: list[str]) -> list[PruneRecord]:
    out = []
    for name in names:
        try:
            doc = documents.load_json(read_at(root_fd, name, str(root / name)))
        except (OSError, ArchiveError, ValueError, RecursionError) as exc:
            out.append(PruneRecord(name, None, str(exc), False))
            continue
        out.append(PruneRecord(name, doc, None, documents.pruned_ok(doc)))
    return out


def pruned_boots(records: list[PruneRecord]) -> dict[str, dict[str, Any]]:
    """manifest digest -> pruned-boot entry, from the valid records only (verify names the rest)."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.valid:
            for entry in record.doc["boots"]:
                out[entry["manifest_sha256"]] = entry
    return out


def chain_head(root_fd: int, root: Path, listing: Listing) -> ChainHead | None:
    """The last sealed boot, pruned ones included. Called under the exclusive root lock.

    A consistent archive numbers its seals 0..n-1, so the newest-first scan stops as soon as it
    meets index n-1, usually at the first manifest read.
    """
    sealed = [b for b in reversed(listing.boots) if is_sealed(root_fd, b)]
    present = {b.name for b in sealed}
    pruned = pruned_boots(read_prune_records(root_fd, root, listing.records))
    gone = [e for e in pruned.values() if e["boot"] not in present]
    expected = len(sealed) + len(gone) - 1
    best: ChainHead | None = None
    for entry in gone:
        if best is None or entry["chain_index"] > best.index:
            best = ChainHead(entry["manifest_sha256"], entry["boot"], entry["chain_index"])
    for boot in sealed:
        if best is not None and best.index >= expected:
            break
        try:
            raw, doc = read_manifest(root_fd, root, boot)
        except (OSError, ArchiveError):
            continue
        idx = doc.get("chain_index") if doc else None
        if isinstance(idx, bool) or not isinstance(idx, int):
            continue
        if best is None or idx > best.index:
            best = ChainHead(hashlib.sha256(raw).hexdigest(), boot.name, idx)
    return best
