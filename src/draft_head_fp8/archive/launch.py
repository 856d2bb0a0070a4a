"""One view of a launch across nodes: the boots of one launch id found in several archive roots
(each node's own disk, copied to one place or mounted, or one root the nodes shared), checked
together: every node's boot there, sealed and byte-intact; every rank of the TP group on exactly
one node, its receipt valid, its diagnostics passed; the ranks' shards one head; and the facts
that must agree across ranks agreeing.

Reads only (``verify`` of each root, then the boots' documents); nothing is written or repaired.
Each problem is one line in the words of docs/contract.md ("Archive", "A launch across nodes").
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.launch_facts import RankEvidence, disagreements, shard_problems
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.nodes import record_of

from .boot import Boot
from .errors import ArchiveError, UnknownBootError
from .store import Archive
from .verify import verify


class UnknownLaunchError(UnknownBootError):
    """No boot of the launch asked for is in any root given."""


@dataclasses.dataclass
class NodeBoot:
    """One node's boot of a launch, as found in one root."""

    root: Path
    boot: Boot
    record: dict  # its place in the launch (nodes.record_of)
    damage: list[str]  # what verify said about this boot's folder

    def describe(self) -> dict[str, Any]:
        summary = self.boot.summary()
        return {
            "node_rank": self.record.get("node_rank"),
            "nnodes": self.record.get("nnodes"),
            "ranks": self.record.get("ranks"),
            "root": str(self.root),
            "boot": self.boot.name,
            "status": summary["status"],
            "host": summary["host"],
            "expected_missing": summary["expected_missing"],
        }


@dataclasses.dataclass
class LaunchView:
    launch_id: str | None
    roots: list[str]
    nodes: list[dict] = dataclasses.field(default_factory=list)
    ranks: list[dict] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    nnodes: int | None = None
    tp_size: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **dataclasses.asdict(self)}


def launch_view(roots: list[str | Path], launch_id: str | None = None) -> LaunchView:
    """Check the launch ``launch_id`` (default: the launch of every root's newest boot) across
    ``roots``. UnknownLaunchError when no root holds a boot of it; ArchiveNotFoundError for a
    root that does not exist."""
    archives = [Archive(root, create=False) for root in roots]
    view = LaunchView(launch_id=None, roots=[str(a.root) for a in archives])
    found = [(a, b, _record(b)) for a in archives for b in a.boots()]
    found = [(a, b, r) for a, b, r in found if r is not None]
    view.launch_id = _choose(found, archives, launch_id, view)
    if view.launch_id is None:
        return view
    mine = [(a, b, r) for a, b, r in found if r.get("launch_id") == view.launch_id]
    reports = {a.root: verify(a.root) for a in {a.root: a for a, _, _ in mine}.values()}
    nodes = [NodeBoot(a.root, b, r, _damage(reports[a.root], b)) for a, b, r in mine]
    for root, report in reports.items():
        outside = [p for p in report.problems if not _inside(p.path, root, nodes)]
        if outside:
            view.notes.append(
                f"{root}: {len(outside)} problem(s) outside this launch's boots (run "
                f"`draft-head-fp8 archive verify --root {root}`)"
            )
    by_node = _by_node(nodes, view)
    view.nodes = [n.describe() for _, n in sorted(by_node.items())]
    if view.problems:
        return view
    for node, n in sorted(by_node.items()):
        _check_node(node, n, view)
    if not view.problems:
        _check_ranks(by_node, view)
    return view


def _record(boot: Boot) -> dict | None:
    identity = boot.identity
    if identity is None:
        return None
    return record_of(identity, boot_launch_id=boot.launch_id, expected=boot.expected_files)


def _choose(
    found: list[tuple[Archive, Boot, dict]],
    archives: list[Archive],
    launch_id: str | None,
    view: LaunchView,
) -> str | None:
    launches = sorted({r.get("launch_id") for _, _, r in found if isinstance(r, dict)}, key=str)
    if launch_id is not None:
        if launch_id in launches:
            return launch_id
        prefixed = [x for x in launches if len(launch_id) >= 4 and str(x).startswith(launch_id)]
        if len(prefixed) == 1:
            return prefixed[0]
        raise UnknownLaunchError(
            f"no boot of launch {launch_id!r} in {', '.join(view.roots)}"
            + (f" (launches there: {', '.join(map(str, launches))})" if launches else "")
        )
    newest: dict[str, Any] = {}
    for archive, _, record in found:  # boots() is in sequence order: the last one wins
        newest[str(archive.root)] = record.get("launch_id")
    if not newest:
        raise UnknownLaunchError(f"no boot of any launch in {', '.join(view.roots)}")
    if len(set(newest.values())) > 1:
        said = ", ".join(f"{lid} in {root}" for root, lid in newest.items())
        view.problems.append(
            f"the roots' newest boots belong to different launches ({said}): name one with "
            "--launch-id"
        )
        return None
    return next(iter(newest.values()))


def _damage(report: Any, boot: Boot) -> list[str]:
    inside = str(boot.path)
    return [
        p.message if p.path == inside else f"{p.path[len(inside) + 1 :]}: {p.message}"
        for p in report.problems
        if p.path == inside or p.path.startswith(inside + "/")
    ]


def _inside(path: str, root: Path, nodes: list[NodeBoot]) -> bool:
    return any(
        n.root == root and (path == str(n.boot.path) or path.startswith(f"{n.boot.path}/"))
        for n in nodes
    )


def _by_node(nodes: list[NodeBoot], view: LaunchView) -> dict[int, NodeBoot]:
    """The one boot of each node; a launch whose boots disagree on its shape, a node with two
    different boots, or a missing node are problems."""
    shapes = {(n.record.get("nnodes"), n.record.get("tp_size")) for n in nodes}
    if len(shapes) > 1:
        said = ", ".join(
            f"{n.boot.name} ({n.root}) says {n.record.get('nnodes')} node(s) at TP "
            f"{n.record.get('tp_size')}"
            for n in nodes
        )
        view.problems.append(f"the boots of launch {view.launch_id} disagree on its shape: {said}")
        return {}
    ((view.nnodes, view.tp_size),) = shapes
    by_node: dict[int, NodeBoot] = {}
    for n in nodes:
        node = n.record.get("node_rank")
        seen = by_node.get(node)
        if seen is None:
            by_node[node] = n
        elif _same_boot(seen, n):
            view.notes.append(f"{n.boot.name} is in {seen.root} and {n.root}: the same bytes")
        else:
            view.problems.append(
                f"node {node} has two different boots of launch {view.launch_id}: "
                f"{seen.boot.name} ({seen.root}) and {n.boot.name} ({n.root})"
            )
    for node in range(view.nnodes or 0):
        if node not in by_node:
            view.problems.append(
                f"node {node} of {view.nnodes} is missing: no boot of launch {view.launch_id} "
                "for it in the roots given"
            )
    return by_node


def _same_boot(a: NodeBoot, b: NodeBoot) -> bool:
    try:
        return a.boot.read_bytes("MANIFEST.json") == b.boot.read_bytes("MANIFEST.json")
    except (OSError, ArchiveError):
        return False


def _check_node(node: int, n: NodeBoot, view: LaunchView) -> None:
    where = f"node {node}'s boot {n.boot.name} ({n.root})"
    if not n.boot.sealed:
        missing = n.boot.summary()["expected_missing"]
        view.problems.append(
            f"{where} is incomplete: {', '.join(missing or []) or 'no file'} missing (never "
            "sealed: the node stopped before its ranks' proof was in)"
        )
    for damage in n.damage:
        view.problems.append(f"{where} is damaged: {damage}")


def _check_ranks(by_node: dict[int, NodeBoot], view: LaunchView) -> None:
    owner: dict[int, int] = {}
    for node, n in sorted(by_node.items()):
        for rank in n.record.get("ranks") or []:
            if rank in owner:
                view.problems.append(f"rank {rank} is claimed by nodes {owner[rank]} and {node}")
            owner.setdefault(rank, node)
    for rank in range(view.tp_size or 0):
        if rank not in owner:
            view.problems.append(f"rank {rank} of {view.tp_size} is on no node's boot")
    if view.problems:
        return
    evidence = []
    for rank, node in sorted(owner.items()):
        found = _rank_evidence(rank, node, by_node[node], view)
        if found is not None:
            evidence.append(found)
    if len(evidence) == len(owner) and len(evidence) > 1:  # one rank has no one to disagree with
        view.problems += [f"across ranks: {p}" for p in shard_problems(evidence, view.tp_size)]
        view.problems += disagreements(evidence)
    if (view.tp_size or 0) > 1:
        _check_ranks_record(by_node[owner[0]], view)


def _rank_evidence(rank: int, node: int, n: NodeBoot, view: LaunchView) -> RankEvidence | None:
    where = f"(node {node}, boot {n.boot.name})"
    receipt, diagnostics = (_read(n.boot, path(rank)) for path in (receipt_path, diagnostics_path))
    row = {"rank": rank, "node_rank": node, "boot": n.boot.name, "receipt": None}
    view.ranks.append(row)
    for what, doc in (("receipt", receipt), ("diagnostics", diagnostics)):
        if isinstance(doc, str):
            view.problems.append(f"rank {rank}'s {what} {where} {doc}")
    if isinstance(receipt, str) or isinstance(diagnostics, str):
        return None
    verdict = receipt_verdict(receipt)
    row["receipt"] = "valid" if verdict is None else verdict
    if verdict is not None:
        view.problems.append(f"rank {rank}'s receipt {where} is not valid: {verdict}")
    said = (receipt.get("tp_rank", 0), receipt.get("tp_size", receipt.get("head_tp_size")))
    if said != (rank, view.tp_size):
        view.problems.append(
            f"rank {rank}'s receipt {where} says rank {said[0]} of {said[1]}, not {rank} of "
            f"{view.tp_size}"
        )
    validation = diagnostics.get("validation") or {}
    if validation.get("passed") is not True:
        view.problems.append(
            f"rank {rank}'s diagnostics {where} record a failed start: {validation.get('reason')}"
        )
    return RankEvidence(rank, receipt, diagnostics, n.boot.identity or {})


def _check_ranks_record(n: NodeBoot, view: LaunchView) -> None:
    record = _read(n.boot, RANKS_PATH)
    if isinstance(record, str):
        view.problems.append(f"the cross-rank record {RANKS_PATH} ({n.boot.name}) {record}")
    elif record.get("passed") is not True or record.get("tp_size") != view.tp_size:
        view.problems.append(
            f"the cross-rank record {RANKS_PATH} ({n.boot.name}) does not pass at TP "
            f"{view.tp_size}: {'; '.join(map(str, record.get('problems') or [])) or 'no reason'}"
        )


def _read(boot: Boot, path: str) -> dict | str:
    """The document, or why it cannot be read (a string)."""
    try:
        doc = json.loads(boot.read_bytes(path))
    except FileNotFoundError:
        return "is missing"
    except (OSError, ArchiveError, ValueError, RecursionError) as exc:
        return f"cannot be read: {exc}"
    return doc if isinstance(doc, dict) else "is not a JSON object"
