"""verify, the chain's part: each sealed manifest links to the one sealed before it (or to a
prune record), with the next chain index, and the links make one line: one start, no fork.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .layout import MANIFEST
from .rootdir import BootEntry
from .verify_report import VerifyReport


@dataclasses.dataclass
class SealedBoot:
    """A sealed boot as verify snapshots it under the lock: its manifest's bytes and digest, and
    the manifest itself once it checks out."""

    boot: BootEntry
    raw: bytes | None
    digest: str | None
    manifest: dict[str, Any] | None  # None when unreadable or invalid


def verify_chain(
    root: Path, snapshot: list[SealedBoot], pruned: dict[str, dict[str, Any]], report: VerifyReport
) -> None:
    by_digest = {s.digest: s for s in snapshot if s.digest}
    by_name = {s.boot.name: s for s in snapshot}
    successors: dict[str, list[SealedBoot]] = {}
    starts: list[SealedBoot] = []
    for s in snapshot:
        m = s.manifest
        if m is None:
            continue
        mpath = root / s.boot.name / MANIFEST
        prev = m["previous"]
        if prev is None:
            if m["chain_index"] != 0:
                report.add(
                    mpath, f"chain_index is {m['chain_index']} but there is no previous manifest"
                )
            starts.append(s)
        elif prev in by_digest:
            successors.setdefault(prev, []).append(s)
            _check_link(mpath, m, by_digest[prev], report)
        elif prev in pruned:
            starts.append(s)
            _check_pruned_link(mpath, m, pruned[prev], report)
        else:
            _report_lost_previous(root, s.boot.name, m, by_name.get(m["previous_boot"]), report)
    _report_forks_and_starts(root, by_digest, successors, starts, report)
    report.chain = _chain_order(starts, successors, len(snapshot))


def _check_link(mpath: Path, m: dict[str, Any], p: SealedBoot, report: VerifyReport) -> None:
    """A manifest linked to a sealed boot's manifest ``p``: names it, and follows its index."""
    idx = m["chain_index"]
    if m["previous_boot"] != p.boot.name:
        report.add(
            mpath,
            f"previous_boot says {m['previous_boot']!r} but the linked manifest is {p.boot.name}'s",
        )
    if p.manifest is not None and idx != p.manifest["chain_index"] + 1:
        report.add(
            mpath,
            f"chain_index {idx} does not follow {p.boot.name}'s {p.manifest['chain_index']}",
        )


def _check_pruned_link(
    mpath: Path, m: dict[str, Any], rec: dict[str, Any], report: VerifyReport
) -> None:
    """A manifest linked to a pruned boot: the prune record must say the same."""
    if m["previous_boot"] != rec["boot"] or m["chain_index"] != rec["chain_index"] + 1:
        report.add(
            mpath,
            f"does not match the prune record of {rec['boot']} (chain index {rec['chain_index']})",
        )


def _report_lost_previous(
    root: Path, boot: str, m: dict[str, Any], named: SealedBoot | None, report: VerifyReport
) -> None:
    """The manifest ``boot``'s manifest ``m`` links to is nowhere: changed after ``boot`` was
    sealed (the boot it names, ``named``, is still there), or deleted without a prune record."""
    prev = m["previous"]
    if named is not None:
        report.add(
            root / named.boot.name / MANIFEST,
            f"changed after {boot} was sealed: its SHA-256 is "
            f"{named.digest}, {boot} recorded {prev}",
        )
    else:
        report.add(
            root / boot / MANIFEST,
            f"previous boot {m['previous_boot']} (manifest {prev[:16]}...) "
            "is gone and no prune record covers it: a sealed boot was deleted",
        )


def _report_forks_and_starts(
    root: Path,
    by_digest: dict[str | None, SealedBoot],
    successors: dict[str, list[SealedBoot]],
    starts: list[SealedBoot],
    report: VerifyReport,
) -> None:
    """One chain has one start and no fork."""
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


def _chain_order(
    starts: list[SealedBoot], successors: dict[str, list[SealedBoot]], boots: int
) -> list[str]:
    """Chain order for the report: from the one start along single successors (never more steps
    than there are boots, whatever the links say)."""
    order, cur = [], starts[0] if len(starts) == 1 else None
    while cur is not None and len(order) <= boots:
        order.append(cur.boot.name)
        nxt = successors.get(cur.digest or "", [])
        cur = nxt[0] if len(nxt) == 1 else None
    return order
