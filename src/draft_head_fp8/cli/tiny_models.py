"""``draft-head-fp8 tiny-models``: a tiny random checkpoint of any drafter family in seconds,
without network."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import EXIT_OK, UsageError, add_command
from draft_head_fp8.tiny import DEMO_FAMILY


def _families() -> list[str]:
    from draft_head_fp8.families import all_families

    return [f.name for f in all_families()]


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "tiny-models",
        "write a tiny random target and drafter of a family (seconds, no network)",
        "examples:\n"
        "  draft-head-fp8 tiny-models /tmp/pair --ordered-embeddings   # a pair the flag refuses\n"
        "  draft-head-fp8 tiny-models /tmp/mimo --family mimo-mtp      # MTP layers in the target\n"
        "  draft-head-fp8 tiny-models /tmp/x --family deepseek-v3-mtp --variant tied_target\n\n"
        "An MTP family writes one folder (the drafter is inside the target's checkpoint); the\n"
        "others write OUT/target and OUT/assistant. `--family NAME --list-variants` says what\n"
        "each variant makes.",
    )
    p.add_argument("out", metavar="OUT", help="folder to write the checkpoint(s) into")
    p.add_argument(
        "--family",
        default=DEMO_FAMILY,
        choices=_families(),
        metavar="NAME",
        help=f"the drafter family (default {DEMO_FAMILY}; one of: {', '.join(_families())})",
    )
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME", help="repeatable, see examples"
    )
    p.add_argument("--list-variants", action="store_true", help="print the family's variants")
    p.add_argument(
        "--ordered-embeddings",
        action="store_true",
        help="= --variant ordered_embeddings: a centroid head (refused)",
    )
    p.add_argument(
        "--untied", action="store_true", help="= --variant untied: head not tied (refused)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.tiny import build, builder

    variants = dict.fromkeys(args.variant, True)
    if args.ordered_embeddings:
        variants["ordered_embeddings"] = True
    if args.untied:
        variants["untied"] = True
    known = getattr(builder(args.family), "VARIANTS", {})
    if args.list_variants:
        for name, what in known.items():
            print(f"{name:<22} {what}")
        return EXIT_OK
    unknown = sorted(set(variants) - set(known))
    if unknown:
        raise UsageError(
            f"{args.family} has no variant {', '.join(unknown)} "
            f"(it has: {', '.join(known) or 'none'})"
        )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file; give a folder to write the checkpoint(s) into")
    try:
        pair = build(args.family, out, seed=args.seed, **variants)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"target     {pair.target}")
    print(f"assistant  {pair.assistant}")
    return EXIT_OK
