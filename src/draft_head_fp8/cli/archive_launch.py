"""``draft-head-fp8 archive launch ROOT [ROOT ...]``: one view of a launch across nodes.

Exit status: 0 the launch's proof is whole (every node's boot sealed and intact, one valid
receipt per rank, the ranks agreeing), 1 it is not (every problem printed), 2 bad input (a root
that does not exist, a launch id no root holds).
"""

from __future__ import annotations

import argparse
import json
import sys

from draft_head_fp8.archive import ROOT_ENV, ArchiveNotFoundError, default_root
from draft_head_fp8.archive.launch import LaunchView, UnknownLaunchError, launch_view

HELP = "check one launch across nodes: every node's boot sealed, one valid receipt per rank"
DESCRIPTION = """\
Check one launch of a multi-node engine (vLLM --nnodes N, or Ray) from its nodes' archives.

Each node keeps its own boot in its own archive root (DRAFT_HEAD_FP8_ARCHIVE on that node):
the receipts and diagnostics of the ranks it runs, and, on the node of rank 0, the cross-rank
record. Give the roots of every node (copied to one machine, or mounted), or the one root they
shared. The launch is whole when every node's boot is there, sealed and byte-intact, every rank
of the TP group has exactly one valid receipt, and the ranks agree on the checkpoint, the head's
shape and shards, the drafter, the flag and the versions.
"""
EPILOG = """\
examples:
  # each node's root copied here, the launch of their newest boots:
  draft-head-fp8 archive launch node0-archive node1-archive
  # one root every node shared (a network file system), a launch by id:
  draft-head-fp8 archive launch /mnt/shared/draft-head-fp8 --launch-id vllm-1796292640
  draft-head-fp8 archive launch node0-archive node1-archive --json | jq .problems

exit status: 0 the launch's proof is whole, 1 it is not (every problem is printed),
2 bad input (a root that does not exist, a launch id that no root holds)
"""


def add_launch_parser(sub, fmt) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "launch", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt
    )
    parser.add_argument(
        "roots",
        nargs="*",
        metavar="ROOT",
        help=f"the archive roots of the launch's nodes (default: ${ROOT_ENV}, else the state "
        "folder)",
    )
    parser.add_argument("--root", metavar="DIR", help="one more root (as the other commands)")
    parser.add_argument(
        "--launch-id",
        metavar="ID",
        help="the launch to check (or a unique prefix of 4+ characters); default: the launch "
        "of every root's newest boot",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def run_launch(args: argparse.Namespace) -> int:
    prog = "draft-head-fp8 archive launch"
    roots = [*args.roots, *([args.root] if args.root else [])] or [str(default_root())]
    try:
        view = launch_view(roots, args.launch_id)
    except (ArchiveNotFoundError, UnknownLaunchError) as exc:
        hint = "; run `draft-head-fp8 archive list --root ROOT` to see the boots"
        print(f"{prog}: error: {exc}{hint}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(view.to_dict(), indent=2, default=str))
    else:
        _print(view)
    return 0 if view.ok else 1


def _print(view: LaunchView) -> None:
    print(f"launch {view.launch_id or '(none chosen)'}", end="")
    if view.nnodes is not None:
        print(f": {view.nnodes} node(s), TP {view.tp_size}", end="")
    print()
    for node in view.nodes:
        print(
            f"  node {node['node_rank']}/{node['nnodes']}  ranks {node['ranks']}  "
            f"{node['status']:<10}  {node['boot']}  host {node['host'] or '-'}  in {node['root']}"
        )
    for rank in view.ranks:
        print(f"  rank {rank['rank']}  node {rank['node_rank']}  receipt {rank['receipt'] or '-'}")
    for problem in view.problems:
        print(f"PROBLEM {problem}")
    for note in view.notes:
        print(f"note: {note}")
    if view.ok:
        print(
            f"launch: ok, {len(view.nodes)} node boot(s) sealed and intact, "
            f"{len(view.ranks)} rank receipt(s) valid and agreeing"
        )
    else:
        print(f"launch: FAILED, {len(view.problems)} problem(s)")
