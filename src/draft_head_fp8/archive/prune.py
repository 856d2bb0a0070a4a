"""prune: delete whole sealed boots, oldest first in chain order, and record the cut.

Refuses unless the archive verifies, since pruning must not destroy evidence of damage. Incomplete
boots are never touched. The cut is recorded first in a write-once PRUNED record, so verify accepts
the first remaining boot's link to a manifest that no longer exists.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from draft_head_fp8 import durable

from .errors import ArchiveError
from .fs import exists_at, fd_closing, wrap_os_error
from .identity import utc_now
from .layout import FILE_MODE, HIDE_PREFIX, MANIFEST, PRUNED_PREFIX, PRUNED_SCHEMA, encode_json
from .rootdir import BootEntry, Listing, is_sealed, open_root, read_manifest, root_lock, scan
from .verify import verify


@dataclasses.dataclass
class PruneResult:
    pruned: list[str]
    kept_sealed: list[str]
    incomplete: list[str]
    record: str | None
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def prune(root: Path, keep: int, *, dry_run: bool = False) -> PruneResult:
    """Delete the oldest sealed boots (chain order) so that ``keep`` sealed boots remain."""
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise ValueError(f"keep must be a whole number >= 0, got {keep!r}")
    report = verify(root)
    # An unsealed later record (a killed engine) does not stop pruning: it goes with its boot.
    if report.problems:
        raise ArchiveError(
            f"the archive does not verify ({len(report.problems)} problem(s)); run "
            "`draft-head-fp8 archive verify`, resolve them, then prune"
        )
    verified = set(report.chain)
    with fd_closing(open_root(root)) as root_fd, root_lock(root_fd, root, exclusive=True):
        listing = scan(root_fd)
        incomplete = [b.name for b in listing.boots if not is_sealed(root_fd, b)]
        entries = _sealed_in_chain_order(root_fd, root, listing, incomplete)
        victims = []
        for idx, boot, digest in entries[: max(0, len(entries) - keep)]:
            if boot.name not in verified:  # sealed after our verify: keep it, and all after it
                break
            victims.append((idx, boot, digest))
        kept = [b.name for _, b, _ in entries[len(victims) :]]
        if dry_run:
            return PruneResult([b.name for _, b, _ in victims], kept, incomplete, None, True)
        for name, kind in listing.other:  # leftovers of an earlier interrupted prune
            if name.startswith(HIDE_PREFIX) and kind == "folder":
                shutil.rmtree(root / name)
        if not victims:
            os.fsync(root_fd)
            return PruneResult([], kept, incomplete, None, False)
        record_name = _record_the_cut(root_fd, root, keep, victims)
        _remove(root_fd, root, [boot for _, boot, _ in victims])
        os.fsync(root_fd)
    pruned = [b.name for _, b, _ in victims]
    return PruneResult(pruned, kept, incomplete, str(root / record_name), False)


def _sealed_in_chain_order(
    root_fd: int, root: Path, listing: Listing, incomplete: list[str]
) -> list[tuple[int, BootEntry, str]]:
    """(chain index, boot, manifest digest) of every sealed boot, first sealed first."""
    entries = []
    for boot in listing.boots:
        if boot.name in incomplete:
            continue
        raw, doc = read_manifest(root_fd, root, boot)
        if doc is None:
            raise ArchiveError(f"{root / boot.name / MANIFEST} became unreadable; run verify")
        entries.append((doc["chain_index"], boot, hashlib.sha256(raw).hexdigest()))
    entries.sort(key=lambda e: e[0])
    return entries


def _record_the_cut(
    root_fd: int, root: Path, keep: int, victims: list[tuple[int, BootEntry, str]]
) -> str:
    """Write the PRUNED record of ``victims`` before any of them goes; returns its name."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    record_name = f"{PRUNED_PREFIX}{stamp}-{secrets.token_hex(4)}.json"
    record = {
        "schema": PRUNED_SCHEMA,
        "pruned_at": utc_now(),
        "keep": keep,
        "boots": [
            {
                "boot": b.name,
                "seq": b.seq,
                "launch_id": b.launch_id,
                "chain_index": idx,
                "manifest_sha256": d,
            }
            for idx, b, d in victims
        ],
    }
    try:
        durable.create_exclusive_at(root_fd, record_name, encode_json(record), mode=FILE_MODE)
    except OSError as exc:
        raise wrap_os_error(exc, f"writing the prune record {root / record_name}") from exc
    return record_name


def _remove(root_fd: int, root: Path, boots: list[BootEntry]) -> None:
    # Each boot is hidden first: an interrupted prune leaves a hidden folder the next one
    # removes, never a half-deleted boot that looks damaged.
    for boot in boots:
        hidden = HIDE_PREFIX + boot.name
        if exists_at(root_fd, hidden):
            shutil.rmtree(root / hidden)
        os.rename(boot.name, hidden, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        os.fsync(root_fd)
        shutil.rmtree(root / hidden)
