"""Which tensor-parallel ranks live on which node, and what each node's boot holds: pure, from
what the ranks tell each other at start-up (no vLLM, no torch), so that the plugin, the archive
readers and the tests reason about one answer.

A *node* is one machine's share of a launch: vLLM's ``--node-rank`` where the launch spans
nodes (``--nnodes N``, the ``mp`` executor), else the host itself (Ray places ranks on
machines without a node rank). Every node keeps its own boot, because every node may have its
own disk: a boot waits only for files its own ranks write, and the launch-wide record
(``diagnostics/ranks.json``) lives on the node that writes it, the one holding rank 0. A launch
on one node is exactly one boot, keyed by the launch id, holding every rank's files, as before.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from draft_head_fp8.evidence import boot_files

# boot.json's record of a node boot's place in its launch (absent where the launch is one node).
LAUNCH_RECORD = "launch"
_NODE_SUFFIX = "-node{node}"
_ID_LIMIT = 64  # the archive's launch-id length (archive/layout.py's LAUNCH_ID)


@dataclass(frozen=True)
class NodePlace:
    """Where one rank's proof goes: node ``node_rank`` of ``nnodes`` of launch ``launch_id``,
    holding TP ranks ``ranks`` of ``tp_size``."""

    launch_id: str
    node_rank: int
    nnodes: int
    ranks: tuple[int, ...]
    tp_size: int

    @property
    def boot_key(self) -> str:
        """The archive's key for this node's boot: the launch id itself on one node (as every
        boot before nodes); else the launch id and the node, so that nodes sharing one root
        never join each other's boot."""
        if self.nnodes == 1:
            return self.launch_id
        suffix = _NODE_SUFFIX.format(node=self.node_rank)
        return self.launch_id[: _ID_LIMIT - len(suffix)] + suffix

    @property
    def expected_files(self) -> list[str]:
        return boot_files(self.tp_size, ranks=self.ranks)

    def record(self) -> dict:
        """boot.json's ``launch`` record (multi-node boots only)."""
        return {
            "launch_id": self.launch_id,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "ranks": list(self.ranks),
            "tp_size": self.tp_size,
        }


class PlacementError(ValueError):
    """What the ranks told each other cannot describe one launch."""


def place(*, rank: int, launch_id: str, node_keys: Sequence[Hashable]) -> NodePlace:
    """This rank's node, given every TP rank's node key in rank order (what the ranks exchanged).

    Nodes are numbered by their lowest rank: vLLM's multi-node executor gives node r the ranks
    ``[r * local, (r + 1) * local)``, so this is vLLM's own node rank there, and node 0 is always
    the node of rank 0 (the one that writes the launch-wide record)."""
    tp_size = len(node_keys)
    if not 0 <= rank < tp_size:
        raise PlacementError(f"rank {rank} is outside the {tp_size} ranks that reported")
    order: list[Hashable] = []
    for key in node_keys:
        if key not in order:
            order.append(key)
    mine = node_keys[rank]
    ranks = tuple(r for r, key in enumerate(node_keys) if key == mine)
    return NodePlace(
        launch_id=launch_id,
        node_rank=order.index(mine),
        nnodes=len(order),
        ranks=ranks,
        tp_size=tp_size,
    )


def single_node(*, launch_id: str, tp_size: int) -> NodePlace:
    """Every rank on one node: the boot of every launch before nodes (and of TP 1)."""
    return NodePlace(launch_id, 0, 1, tuple(range(tp_size)), tp_size)


def record_of(identity: dict, *, boot_launch_id: str, expected: list[str] | None) -> dict:
    """A boot's place in its launch, as boot.json says it: its ``launch`` record, or, for a boot
    of one node (no record), node 0 of 1 holding the ranks whose receipts it expects."""
    recorded = identity.get(LAUNCH_RECORD)
    if recorded is not None:
        return recorded
    ranks = sorted(
        int(name.removeprefix("receipts/post_share-rank").removesuffix(".json"))
        for name in expected or ()
        if name.startswith("receipts/post_share-rank")
        and name.removeprefix("receipts/post_share-rank").removesuffix(".json").isdigit()
    )
    return {
        "launch_id": boot_launch_id,
        "node_rank": 0,
        "nnodes": 1,
        "ranks": ranks,
        "tp_size": len(ranks),
    }
