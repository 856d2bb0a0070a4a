"""``draft-head-fp8 demo``: the whole product on tiny real Gemma 4 checkpoints.

``compare`` on the pair that ships with the package (trained here so that drafts get accepted),
or on a freshly built random one: the real vLLM engine twice, BF16 then FP8 draft head, the same
table, the receipt's checks one by one, and where the boot sits in the archive.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import add_command
from draft_head_fp8.cli.compare import (
    DEFAULT_PROMPTS,
    add_engine_arguments,
    compare_and_report,
    default_cache,
    engine_options,
    progress,
)


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "demo",
        "run vLLM with the BF16 and then the FP8 draft head on tiny real models and compare",
        "  draft-head-fp8 demo --json demo.json",
    )
    p.add_argument(
        "--models",
        choices=("trained", "random"),
        default="trained",
        help="trained: the shipped pair, trained so drafts get accepted (default); "
        "random: a freshly built random pair (accepts ~nothing)",
    )
    add_engine_arguments(p, max_model_len=256, kv_bytes=64 << 20)
    p.set_defaults(func=run)


def _models(kind: str, cache: Path) -> tuple[Path, Path]:
    from draft_head_fp8.tiny import build_tiny_pair, shipped_pair

    if kind == "trained":
        pair = shipped_pair()
        return pair.target, pair.assistant
    folder = cache / "random-pair"
    if not (folder / "assistant" / "config.json").exists():
        progress(f"      building a random tiny pair into {folder} (once)")
        pair = build_tiny_pair(folder, seed=0)
        return pair.target, pair.assistant
    return folder / "target", folder / "assistant"


def run(args: argparse.Namespace) -> int:
    cache = Path(args.cache) if args.cache else default_cache("demo")
    progress(f"[1/4] models ({args.models}); cache {cache}")
    target, assistant = _models(args.models, cache)
    return compare_and_report(target, assistant, engine_options(args, DEFAULT_PROMPTS), args, cache)
