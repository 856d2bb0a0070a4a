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
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import (
    EXIT_FAILED,
    EXIT_INELIGIBLE,
    EXIT_OK,
    UsageError,
    add_command,
    mib,
)

DEFAULT_PROMPTS = [
    "Return a new list containing",
    "This module provides",
    "Create a new dictionary with",
    "The default value is",
    "Raise ValueError if",
    "Return True if the",
]
EXAMPLE = """examples:
  draft-head-fp8 compare --target ./gemma-4-31b --assistant ./gemma-4-31b-assistant \\
      --prompts prompts.txt --max-tokens 128 --tensor-parallel-size 2 --json compare.json

exit status: 0 proven and lossless, 1 an engine failed or a check did not hold, 2 bad input,
3 the flag refuses this assistant (the reason is printed)"""


def add_engine_arguments(p: argparse.ArgumentParser, *, max_model_len: int, kv_bytes: int) -> None:
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
        help=f"KV cache size; 0 lets vLLM size it (default {kv_bytes})",
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
    p.add_argument("--assistant", required=True, metavar="DIR", help="the MTP assistant folder")
    p.add_argument(
        "--prompts",
        metavar="FILE",
        help="one prompt per line, or a JSON list of strings (default: six short prompts)",
    )
    add_engine_arguments(p, max_model_len=1024, kv_bytes=0)
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


def engine_options(args: argparse.Namespace, prompts: list[str]) -> Any:
    from draft_head_fp8.comparison import EngineOptions

    for name in ("max_tokens", "speculative_tokens", "tensor_parallel_size", "max_model_len"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be 1 or more")
    return EngineOptions(
        prompts=prompts,
        max_tokens=args.max_tokens,
        speculative_tokens=args.speculative_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        eager=not args.no_eager,
    )


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.2f} KiB"


def _rate(f: dict) -> str:
    if f["acceptance_rate"] is None:
        return "no drafts"
    counts = f"{f['accepted_tokens']}/{f['draft_tokens']}"
    return f"{f['acceptance_rate']:.1%} (mean length {f['mean_acceptance_length']:.2f}; {counts})"


def _ms(f: dict) -> str:
    ms = f["draft_head_ms_per_call"]
    return "-" if ms is None else f"{ms:.3f} ms (median of {f['draft_head_calls']} calls)"


def _memory(f: dict) -> str:
    if f["peak_device_bytes"]:
        return f"{mib(f['peak_device_bytes'])} (GPU, largest rank)"
    return "-" if f["peak_rss_bytes"] is None else f"{mib(f['peak_rss_bytes'])} (RSS)"


def _shape(receipt: dict) -> str:
    weight = receipt["head_weight"] or {}
    text = f"{weight.get('shape')} {str(weight.get('dtype')).removeprefix('torch.')}"
    layout = receipt.get("head_weight_layout")
    if layout and layout != "plain":
        text += f", {layout} (logical {receipt.get('head_weight_logical_shape')})"
    return text


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def render(facts: dict) -> str:
    from draft_head_fp8.comparison import head_bytes, snapshot_bytes

    off, on = facts["flag_off"], facts["flag_on"]
    a = off["after_start"]["receipt"]  # the stock head, observed (rank 0)
    b = facts["receipt"]["document"]  # the FP8 head, as archived (rank 0)
    fa, fb = facts["figures"]["flag_off"], facts["figures"]["flag_on"]
    pick = facts["diagnostics"].get("exact_pick") or {}
    rows: list[tuple[str, str, str]] = []

    def row(label: str, left: Any, right: Any) -> None:
        rows.append((label, str(left), str(right)))

    same_after = (
        on["after_generate"]["target_embed_sha256"] == on["after_start"]["target_embed_sha256"]
    )
    row("draft head method", a["head_method"], b["head_method"])
    row("draft head kernel", a["head_kernel"] or "unquantized GEMM", b["head_kernel"])
    row("draft head weight (rank 0)", _shape(a), _shape(b))
    row("draft head bytes per read", _kib(head_bytes(a)), _kib(head_bytes(b)) + " incl. scale")
    rows_bytes = snapshot_bytes(pick.get("rows")) or 0
    row(
        "draft head memory",
        _kib(head_bytes(a)),
        f"{_kib((head_bytes(b) or 0) + rows_bytes)} (FP8 + the BF16 rows of the exact pick)"
        if rows_bytes
        else _kib(head_bytes(b)),
    )
    row("draft tokens", "the BF16 head's", pick.get("guarantee", "-"))
    row("draft head time per call", _ms(fa), _ms(fb))
    row("draft acceptance", _rate(fa), _rate(fb))
    identical = facts["draft_tokens_identical"]
    agreement = on.get("draft_agreement") or {}
    if identical is not None:
        row(
            "FP8 draft token == BF16 draft token",
            "-",
            f"{agreement['agree']}/{agreement['steps']} ({identical:.1%})",
        )
    tps = [f"{f['tokens_per_second']:.1f}" if f["tokens_per_second"] else "-" for f in (fa, fb)]
    row("generation tokens/s", tps[0], tps[1])
    row("peak memory", _memory(fa), _memory(fb))
    row(
        "target head",
        f"{a['target_lm_head_method']}, {(a['target_lm_head_weight'] or {}).get('dtype')}",
        f"{b['target_lm_head_method']}, {(b['target_lm_head_weight'] or {}).get('dtype')}",
    )
    row(
        "target embedding sha256",
        off["after_start"]["target_embed_sha256"][:16] + "...",
        on["after_start"]["target_embed_sha256"][:16]
        + ("... (same after generation)" if same_after else "... (CHANGED after generation)"),
    )
    row(
        "draft embedding is the target's",
        a["draft_embed_weight_is_target_embed"],
        b["draft_embed_weight_is_target_embed"],
    )

    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows)
    head = f"{'':<{width}}  {'flag off (BF16 draft head)':<{left}}  flag on (FP8 draft head)"
    lines = ["", head]
    lines += [f"{label:<{width}}  {value:<{left}}  {other}" for label, value, other in rows]
    lines.append("")
    lines.append(
        f"final texts identical: {_yes(facts['texts_identical'])}"
        f"   vLLM's spec-decode counters identical: {_yes(facts['spec_decode_identical'])}"
        f"   target embedding unchanged: {_yes(facts['target_embed_unchanged'])}"
        f"   flag-off run wrote nothing: {_yes(facts['flag_off_wrote_nothing'])}"
    )
    diag = facts["diagnostics"]["head"]
    made_from = (
        diag["provenance_verified"] and diag["source_sha256"] == diag["checkpoint"]["sha256"]
    )
    lines.append(
        f"FP8 bytes made from the checkpoint's embed_tokens: {_yes(made_from)} "
        f"(sha256 {diag['source_sha256'][:16]}...); scale {diag['scale']:.3e}; "
        f"largest/median row amax {diag['row_amax_ratio']:.2f}"
    )
    if diag.get("kernel_warning"):
        lines.append(f"warning: {diag['kernel_warning']}")
    slower = (fb["draft_head_ms_per_call"] or 0) > (fa["draft_head_ms_per_call"] or 0)
    if slower and (head_bytes(a) or 0) < 16 << 20:
        lines.append(
            "note: a head this small costs its fixed per-call work, not its bytes; at 1024 x "
            "262144 the FP8 head took 0.55x the BF16 head's time here (docs/benchmarks.md)"
        )
    receipt = facts["receipt"]
    ranks = receipt["ranks"]
    scope = f", {ranks['tp_size']} ranks" if ranks else ""
    verdict = "VALID" if receipt["valid"] else "INVALID: " + "; ".join(receipt["reasons"])
    version = receipt["schema"].rsplit("/", 1)[-1]
    lines += ["", f"receipt {receipt['path']} ({version}{scope}): {verdict}"]
    for check in receipt["checks"]:
        mark = {True: "pass", False: "FAIL", None: "----"}[check["passed"]]
        lines.append(f"  {mark}  {check['check']}")
    archive = facts["archive"]
    verified = "ok" if archive["verify_ok"] else "PROBLEMS"
    lines += ["", f"archive {archive['root']} (verify: {verified}), newest boots:"]
    for boot in archive["newest"]:
        marker = "  <- this run" if boot.get("boot") == receipt["boot"] else ""
        lines.append(
            f"  {boot.get('seq'):>4}  {boot.get('status'):<10}  {boot.get('started_at')}  "
            f"{boot.get('launch_id')}  {boot.get('files')} files{marker}"
        )
    lines.append("")
    lines.append(f"see it again: draft-head-fp8 archive show -1 --root {archive['root']}")
    return "\n".join(lines)


def default_cache(name: str) -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("draft-head-fp8")) / name


def compare_and_report(
    target: Path, assistant: Path, options: Any, args: argparse.Namespace, cache: Path
) -> int:
    """Both runs, the table on stdout, the JSON if asked: what ``demo`` and ``compare`` do."""
    from draft_head_fp8.comparison import EngineFailed, Refused, compare, ok

    archive_root = Path(args.archive) if args.archive else cache / "archive"
    try:
        facts = compare(
            target, assistant, options, cache=cache, archive_root=archive_root, progress=progress
        )
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_INELIGIBLE
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
    progress(f"[1/4] checking {args.assistant} against {args.target} (configs only)")
    try:
        preflight = check_assistant(args.assistant, args.target)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    if not preflight.eligible:
        print(f"refused: {preflight.reason}", file=sys.stderr)
        return EXIT_INELIGIBLE
    cache = Path(args.cache) if args.cache else default_cache("compare")
    return compare_and_report(Path(args.target), Path(args.assistant), options, args, cache)
