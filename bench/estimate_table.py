"""What the FP8 draft head should buy on real targets: ``check --estimate`` on header-only
checkpoints in their published shapes (``bench/published_shapes.py`` says which and from where).

    python -m bench.estimate_table [--out DIR] [--json PATH]

For each pair, at batch 1 and 8 with 1, 2 and 3 draft tokens, the function ``check --estimate``
calls (``estimate.step_bytes``, with the command's defaults: top-8 rescoring, H200 bandwidth):
the bytes one decode step reads with the BF16 head and with the FP8 head, and the speed-up at
equal acceptance (the exact pick keeps every draft token the BF16 head's). A memory-bound model
from configs and safetensors headers alone: no weight exists, none is read. The checkpoints go
to a temporary folder removed afterwards, or to ``--out DIR`` (kept; about 34 MB of headers).
Prints the full table and the README's compact one; writes bench/results/estimate_table.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import write_json
from bench.published_shapes import PAIRS, Pair
from draft_head_fp8 import estimate, families, settings
from draft_head_fp8.checkpoint import read_config

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "estimate_table.json"
BATCHES = (1, 8)
DRAFT_TOKENS = (1, 2, 3)


def unplaced_drafter(target: Path, draft: Path) -> str | None:
    """Why the estimate cannot tell the drafter's bytes from the target's, or None.

    MTP layers ship inside the target's checkpoint; only a family record says under which
    names. Without one, ``step_bytes`` would read the whole target as the draft's body."""
    config = read_config(draft)
    family = families.for_config(config, draft)
    if target.resolve() != draft.resolve() or (family and family.draft_prefixes):
        return None
    return (
        f"not estimated: no drafter family in this tree places the MTP layers of a "
        f"{config.get('model_type')} checkpoint yet (the whole target would count as the draft)"
    )


def row(target: Path, draft: Path, batch: int, tokens: int) -> dict:
    step = estimate.step_bytes(
        target,
        draft,
        speculative_tokens=tokens,
        batch=batch,
        rescore_k=settings.DEFAULT_RESCORE_TOPK,
    )
    return {
        "batch": batch,
        "speculative_tokens": tokens,
        "bytes": estimate.bytes_read(step),
        "seconds_h200": {
            "step_bf16": estimate.seconds(step.bf16, estimate.H200_GBPS),
            "step_fp8": estimate.seconds(step.fp8, estimate.H200_GBPS),
        },
        "speedup_equal_acceptance": estimate.speedup(step),
        "break_even_loss": estimate.break_even_loss(step),
        "head_share_bf16": step.draft_head_bf16 / step.bf16,
        "notes": step.notes,
    }


def estimate_pair(pair: Pair, out: Path) -> dict:
    """Write ``pair``'s checkpoints under ``out`` and estimate every batch and token count."""
    target, draft = pair.write(out / pair.key)
    config = read_config(draft)
    family = families.for_config(config, draft)
    text = config.get("text_config") or config
    # The head a draft token reads: the target's vocabulary, or the drafter's own (EAGLE-3).
    head = estimate.head_shape(read_config(target), config, draft)
    result = {
        "target": pair.target,
        "drafter": pair.drafter,
        "family": family.name if family else None,
        "hidden": text["hidden_size"],
        "vocab": text["vocab_size"],
        "head_rows": head.rows,
        "folders": {"target": str(target.relative_to(out)), "draft": str(draft.relative_to(out))},
        "rows": [],
        "reason": unplaced_drafter(target, draft),
    }
    if result["reason"] is None:
        result["rows"] = [row(target, draft, b, n) for b in BATCHES for n in DRAFT_TOKENS]
    return result


def run(out: Path) -> dict:
    started = time.perf_counter()
    pairs = {pair.key: estimate_pair(pair, out) for pair in PAIRS}
    return {
        "schema": "draft-head-fp8-bench-estimate-table/v1",
        "what": "check --estimate on header-only checkpoints in published shapes",
        "model": "memory-bound decode step: bytes read / bandwidth",
        "bandwidth_gbps": estimate.H200_GBPS,
        "rescore_top_k": settings.DEFAULT_RESCORE_TOPK,
        "batches": list(BATCHES),
        "speculative_tokens": list(DRAFT_TOKENS),
        "shapes": "bench/published_shapes.py",
        "pairs": pairs,
        "seconds_total": round(time.perf_counter() - started, 1),
    }


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def _pct(x: float) -> str:
    return f"+{x:.2%}" if x >= 0 else f"{x:.2%}"


def _cell(r: dict) -> str:
    b, gain = r["bytes"], _pct(r["speedup_equal_acceptance"])
    return f"{_gb(b['step_bf16'])} -> {_gb(b['step_fp8'])} GB, **{gain}**"


def _title(p: dict) -> str:
    return f"{p['target']} + {p['drafter']} ({p['head_rows']} x {p['hidden']} head)"


def full_table(result: dict) -> str:
    """Per pair and batch: bytes per step BF16 -> FP8 head and the speed-up, per token count."""
    heads = " | ".join(f"{n} draft token{'s' if n > 1 else ''}" for n in DRAFT_TOKENS)
    lines = [f"| pair | batch | {heads} |", "| --- | ---: |" + " --- |" * len(DRAFT_TOKENS)]
    for p in result["pairs"].values():
        if p["reason"]:
            lines.append(f"| {_title(p)} | - | {p['reason']} |" + " |" * (len(DRAFT_TOKENS) - 1))
            continue
        for batch in BATCHES:
            cells = [_cell(r) for r in p["rows"] if r["batch"] == batch]
            lines.append(f"| {_title(p)} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compact_table(result: dict) -> str:
    """Speed-up at batch 1 and 8 with 1 / 2 / 3 draft tokens, and the BF16 head's share of a
    step's bytes at 2 draft tokens."""
    lines = [
        "| target + drafter | head | speed-up, batch 1: 1 / 2 / 3 draft tokens | batch 8: "
        "1 / 2 / 3 | head share of a step, batch 1 / 8, 2 draft tokens |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in result["pairs"].values():
        name, head = f"{p['target']} + {p['drafter']}", f"{p['head_rows']} x {p['hidden']}"
        if p["reason"]:
            lines.append(f"| {name} | {head} | {p['reason']} | | |")
            continue
        by = {(r["batch"], r["speculative_tokens"]): r for r in p["rows"]}
        gains = [
            " / ".join(_pct(by[b, n]["speedup_equal_acceptance"]) for n in DRAFT_TOKENS)
            for b in BATCHES
        ]
        share = " / ".join(f"{by[b, 2]['head_share_bf16']:.1%}" for b in BATCHES)
        lines.append(f"| {name} | {head} | {gains[0]} | {gains[1]} | {share} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="keep the checkpoints here (an empty folder)")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    args = parser.parse_args(argv)
    if args.out is not None:
        if args.out.exists() and any(args.out.iterdir()):
            parser.error(f"{args.out} already holds files; choose an empty folder")
        result = run(args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="estimate-table-") as scratch:
            result = run(Path(scratch))
    print(full_table(result), end="\n\n")
    print(compact_table(result))
    write_json(args.json, result)
    print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
