"""A launch across nodes, as the post-share point sees it in one worker: which node this rank is
on (``draft_head_fp8.nodes`` decides, from what every rank reports), and the archive's root
steps taken node by node.

Why node by node: nodes may share one archive root on a network file system, where a flock
taken on one machine may not hold on another (NFS mounted ``nolock``, some FUSE systems). The
root's two shared decisions, the next sequence number and the chain head a seal links to, are
therefore never taken by two nodes at once: node 0's ranks take them first, then node 1's, with
a barrier of the launch's own process group between turns. Within a node the root lock is a
local flock, which holds. Every rank reaches every barrier, whatever its own turn raised, so a
failing node never leaves the others waiting.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

from draft_head_fp8.evidence import diagnostics
from draft_head_fp8.evidence.ranks import cross_rank_problems, rank_summary
from draft_head_fp8.nodes import NodePlace, place, single_node

T = TypeVar("T")


def _host() -> tuple[str, str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = ""
    return socket.gethostname(), boot_id


def node_key(vllm_config: Any) -> tuple:
    """What puts two ranks on one node: vLLM's node rank where the launch spans nodes (two
    nodes may run on one machine, as on loopback), and the machine itself (Ray places ranks on
    machines with no node rank)."""
    parallel = getattr(vllm_config, "parallel_config", None)
    try:
        node = int(getattr(parallel, "node_rank_within_dp", 0) or 0)
    except (TypeError, ValueError):
        node = int(getattr(parallel, "node_rank", 0) or 0)
    return (node, *_host())


def place_rank(
    *,
    launch_id: str,
    vllm_config: Any,
    rank: int,
    tp_size: int,
    exchange: Callable[[Any, int], list[Any]],
) -> NodePlace:
    """This rank's node in the launch; rank 0's launch id names the launch (one exchange, the
    one that already carried the launch id)."""
    if tp_size == 1:
        return single_node(launch_id=launch_id, tp_size=1)
    reports = exchange((launch_id, node_key(vllm_config)), tp_size)
    return place(rank=rank, launch_id=reports[0][0], node_keys=[key for _, key in reports])


def exchange(value: Any, tp_size: int) -> list[Any]:
    """Every rank's value, on every rank (one small all-gather over the TP group's CPU side)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * tp_size
    dist.all_gather_object(gathered, value, group=_tp_group().cpu_group)
    return gathered


def tp_barrier() -> None:
    import torch.distributed as dist

    dist.barrier(group=_tp_group().cpu_group)


def in_node_turns(
    where: NodePlace, action: Callable[[], T], barrier: Callable[[], None] | None = None
) -> T | None:
    """``action`` on this rank in its node's turn (node 0 first); on one node, at once. Raises
    what ``action`` raised only after the last turn. ``barrier``: the TP group's by default."""
    if where.nnodes == 1:
        return action()
    barrier = barrier or tp_barrier
    result, error = None, None
    for node in range(where.nnodes):
        if node == where.node_rank:
            try:
                result = action()
            except Exception as exc:  # raised below, once every node has had its turn
                error = exc
        barrier()
    if error is not None:
        raise error
    return result


def cross_check(
    *, rank: int, tp_size: int, failure: str | None, receipt: dict, record: dict, pick: dict,
    keep_ranks: Callable[[dict], None] | None,
) -> str | None:  # fmt: skip
    """Each rank proved its own shard; together they must be one head (at start-up and after
    every weight update alike). Every rank reaches this point, a failed one too, so no rank waits
    for another that already gave up; rank 0 keeps the ranks' record (``keep_ranks``, None where
    nothing can be kept). Returns this rank's failure, else the ranks' disagreement (None: they
    agree)."""
    mine = rank_summary(
        rank=rank, tp_size=tp_size, failure=failure, receipt=receipt,
        scale=record["head"].get("scale"), top_k=pick["top_k"],
    )  # fmt: skip
    summaries = exchange(mine, tp_size)
    problems = cross_rank_problems(summaries, tp_size)
    if rank == 0 and keep_ranks is not None:
        keep_ranks(
            diagnostics.ranks_record(tp_size=tp_size, summaries=summaries, problems=problems)
        )
    if problems and failure is None:
        failure = "across ranks: " + "; ".join(problems)
    return failure


def _tp_group() -> Any:
    from draft_head_fp8.vllm_plugin import seams

    return seams.read("tp_group")()
