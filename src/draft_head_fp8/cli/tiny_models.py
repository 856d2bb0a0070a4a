"""``draft-head-fp8 tiny-models``: a tiny random Gemma 4 pair in seconds, without network."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import EXIT_OK, UsageError, add_command


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "tiny-models",
        "write a tiny random Gemma 4 target and MTP assistant (seconds, no network)",
        "  draft-head-fp8 tiny-models /tmp/pair --ordered-embeddings   # a pair the flag refuses",
    )
    p.add_argument("out", metavar="OUT", help="folder to create target/ and assistant/ in")
    p.add_argument(
        "--ordered-embeddings", action="store_true", help="E2B/E4B-style centroid head (refused)"
    )
    p.add_argument(
        "--untied", action="store_true", help="head not tied to the draft embedding (refused)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.tiny import build_tiny_pair

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file; give a folder to write target/ and assistant/ into")
    try:
        pair = build_tiny_pair(
            out, ordered_embeddings=args.ordered_embeddings, untied=args.untied, seed=args.seed
        )
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"target     {pair.target}")
    print(f"assistant  {pair.assistant}")
    return EXIT_OK
