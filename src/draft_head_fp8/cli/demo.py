"""``draft-head-fp8 demo``: the whole product on tiny real checkpoints.

``compare`` on the pair that ships with the package (trained here so that drafts get accepted),
or on a freshly built random one: the real vLLM engine twice, BF16 then FP8 draft head, the same
table, the receipt's checks one by one, and where the boot sits in the archive.

At this size the FP8 head is slower than the BF16 one (its fixed per-call work dominates), so by
default the flag would serve every batch from the BF16 rows; the demo asks for the FP8 head at
every batch (``DRAFT_HEAD_FP8_BF16_FROM=never``) to show its exact draft tokens, and prints what
the default would do here, measured at load. On a CPU without a fast FP8 path the flag refuses
start-up; the demo shows that refusal, then runs the slow path it names, and says so.
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
from draft_head_fp8.policy import NO_FAST_CPU_HEAD
from draft_head_fp8.settings import BF16_FROM_ENV, BF16_FROM_NEVER, SLOW_CPU_OVERRIDE


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


# The FP8 head at every batch: the demo shows it, not the BF16 rows the default picks at this size.
FP8_EVERYWHERE = ((BF16_FROM_ENV, BF16_FROM_NEVER),)


def _slow_path_instead(args: argparse.Namespace) -> Any:
    """After the refusal of a CPU with no fast FP8 head: the same run on the slow path it names,
    said plainly, so that the proof is still shown."""

    def retry(reason: str) -> Any:
        if not reason.startswith(NO_FAST_CPU_HEAD):
            return None
        progress(
            f"      that is the flag's default on this CPU: it refuses. The demo now runs the slow "
            f"path the refusal names ({SLOW_CPU_OVERRIDE}) to show its proof; that path is not "
            "faster than BF16 here and is not what the flag serves by default."
        )
        override = tuple(SLOW_CPU_OVERRIDE.split("=", 1))
        return engine_options(args, DEFAULT_PROMPTS, flag_on_env=(*FP8_EVERYWHERE, override))

    return retry


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
    options = engine_options(args, DEFAULT_PROMPTS, flag_on_env=FP8_EVERYWHERE)
    return compare_and_report(
        target, assistant, options, args, cache, after_refusal=_slow_path_instead(args)
    )
