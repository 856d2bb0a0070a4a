"""``draft-head-fp8 demo``: the whole product on tiny real Gemma 4 checkpoints.

Starts the real vLLM engine twice on the same target, assistant and prompts (flag off: BF16 draft
head; flag on: FP8 draft head), then shows side by side what was quantized and what was not, what
speculative decoding accepted, the receipt's checks one by one, and where the boot sits in the
archive. Both columns are read from receipts: the archived one of the FP8 run, and the same
capture of the stock head for the BF16 run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from draft_head_fp8.cli._common import EXIT_FAILED, EXIT_OK, add_command

PROMPTS = [
    "Return a new list containing",
    "This module provides",
    "Create a new dictionary with",
    "The default value is",
    "Raise ValueError if",
    "Return True if the",
]


def default_cache() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("draft-head-fp8")) / "demo"


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "demo",
        "run vLLM with the BF16 and then the FP8 draft head on tiny real models and compare",
        "  draft-head-fp8 demo --json demo.json",
    )
    p.add_argument("--json", metavar="FILE", help="also write every fact shown as JSON to FILE")
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="where models, logs and vLLM caches go (default: the user cache folder, "
        "draft-head-fp8/demo)",
    )
    p.add_argument(
        "--archive", metavar="DIR", help="archive for the demo's boots (default: CACHE/archive)"
    )
    p.add_argument(
        "--models",
        choices=("trained", "random"),
        default="trained",
        help="trained: the shipped pair, trained so drafts get accepted (default); "
        "random: a freshly built random pair (accepts ~nothing)",
    )
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per prompt (default 32)")
    p.add_argument(
        "--speculative-tokens", type=int, default=2, help="draft tokens per step (default 2)"
    )
    p.set_defaults(func=run)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _models(kind: str, cache: Path) -> tuple[Path, Path]:
    from draft_head_fp8.tiny import build_tiny_pair, shipped_pair

    if kind == "trained":
        pair = shipped_pair()
        return pair.target, pair.assistant
    folder = cache / "random-pair"
    if not (folder / "assistant" / "config.json").exists():
        _progress(f"      building a random tiny pair into {folder} (once)")
        pair = build_tiny_pair(folder, seed=0)
        return pair.target, pair.assistant
    return folder / "target", folder / "assistant"


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.2f} KiB"


def _rate(spec: dict) -> str:
    rate, length = spec.get("acceptance_rate"), spec.get("mean_acceptance_length")
    if rate is None:
        return "no drafts"
    counts = f"{int(spec['num_accepted_tokens'])}/{int(spec['num_draft_tokens'])}"
    return f"{rate:.1%} (mean length {length:.2f}; {counts})"


def _dtype(snapshot: dict | None) -> str:
    return str((snapshot or {}).get("dtype"))


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def render(facts: dict) -> str:
    from draft_head_fp8.comparison import head_bytes

    off, on = facts["flag_off"], facts["flag_on"]
    a = off["after_start"]["receipt"]  # the stock head, observed
    b = facts["receipt"]["document"]  # the FP8 head, as archived
    rows: list[tuple[str, str, str]] = []

    def row(label: str, left: Any, right: Any) -> None:
        rows.append((label, str(left), str(right)))

    same_after = (
        on["after_generate"]["target_embed_sha256"] == on["after_start"]["target_embed_sha256"]
    )
    row("draft head method", a["head_method"], b["head_method"])
    row("draft head kernel", a["head_kernel"] or "unquantized GEMM", b["head_kernel"])
    row("draft head dtype", _dtype(a["head_weight"]), _dtype(b["head_weight"]))
    row(
        "draft head shape",
        a["head_weight"]["shape"],
        f"{b['head_weight']['shape']} (stored [hidden, vocab])",
    )
    row("draft head bytes per read", _kib(head_bytes(a)), _kib(head_bytes(b)) + " incl. 4 B scale")
    row(
        "target head",
        f"{a['target_lm_head_method']}, {_dtype(a['target_lm_head_weight'])}",
        f"{b['target_lm_head_method']}, {_dtype(b['target_lm_head_weight'])}",
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
    row("draft acceptance", _rate(off["spec_decode"]), _rate(on["spec_decode"]))
    agreement = on.get("draft_agreement") or {}
    if agreement.get("steps"):
        share = agreement["agree"] / agreement["steps"]
        row(
            "FP8 draft token == BF16 draft token",
            "-",
            f"{agreement['agree']}/{agreement['steps']} ({share:.1%})",
        )
    row("generation seconds", off["seconds"]["generate"], on["seconds"]["generate"])

    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows)
    lines = ["", f"{'':<{width}}  {'flag off (BF16 draft head)':<{left}}  flag on (FP8 draft head)"]
    lines += [f"{label:<{width}}  {value:<{left}}  {other}" for label, value, other in rows]
    lines.append("")
    lines.append(
        f"final texts identical: {_yes(facts['texts_identical'])}"
        f"   target embedding unchanged: {_yes(facts['target_embed_unchanged'])}"
        f"   flag-off run wrote nothing: {_yes(facts['flag_off_wrote_nothing'])}"
    )
    head = facts["diagnostics"]["head"]
    made_from = (
        head["provenance_verified"] and head["source_sha256"] == head["checkpoint"]["sha256"]
    )
    lines.append(
        f"FP8 bytes made from the checkpoint's embed_tokens: {_yes(made_from)} "
        f"(sha256 {head['source_sha256'][:16]}...); scale {head['scale']:.3e}; "
        f"largest/median row amax {head['row_amax_ratio']:.2f}"
    )
    if "Torch" in str(b["head_kernel"]) and off["seconds"]["generate"] < on["seconds"]["generate"]:
        lines.append(
            "note: on a CPU the FP8 head is slower (torch._scaled_mm has no fast CPU path); the "
            "CPU run proves the seam and the receipt, the speed-up is a GPU matter "
            "(docs/benchmarks.md)"
        )
    receipt = facts["receipt"]
    lines += ["", f"receipt {receipt['path']}: {'VALID' if receipt['valid'] else 'INVALID'}"]
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


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.comparison import compare

    cache = Path(args.cache) if args.cache else default_cache()
    archive_root = Path(args.archive) if args.archive else cache / "archive"
    _progress(f"[1/4] models ({args.models}); cache {cache}")
    target, assistant = _models(args.models, cache)
    facts = compare(
        target,
        assistant,
        PROMPTS,
        cache=cache,
        archive_root=archive_root,
        max_tokens=args.max_tokens,
        speculative_tokens=args.speculative_tokens,
        progress=_progress,
    )
    facts["models"]["kind"] = args.models
    print(render(facts))
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        _progress(f"facts written to {args.json}")
    ok = facts["receipt"]["valid"] and facts["texts_identical"] and facts["target_embed_unchanged"]
    return EXIT_OK if ok else EXIT_FAILED
