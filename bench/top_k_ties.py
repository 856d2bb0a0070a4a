"""How often a draft row's K + 1 best BF16 logits tie: the rows ``top_k_rows`` hands whole (every
logit exact, one BF16 row each, counted at stage c) when a drafter reads the head's top-K
(DFlash2's candidate selector, DSpark's ``dspark_draft_topk``; docs/certificate.md, "Serving a
top-K"). A row without such a tie costs the certified top-K only.

    python -m bench.top_k_ties [--shapes NAME ...] [--rows 256] [--logit-std 4.0] [--out FILE]

On ``fidelity_families``' synthetic heads of published shapes (rows N(0, logit_std /
sqrt(hidden)), bulk logits about N(0, ``--logit-std``)) with ``fidelity``'s two kinds of hidden
states: ``gaussian`` (no token preferred) and ``peaked`` (one token's logit about two standard
deviations above the expected bulk maximum: a confident draft). BF16 logits as vLLM's
unquantized head computes them (``F.linear``). What it cannot show: a trained model's logits,
whose top is shaped by its training; the figures are this synthetic model's, not a promise.
"set only": a drafter that reads the set of the K best, not ``torch.topk``'s order (DSpark's
top-k path scatters them back by token id), needs a whole row only where the K-th and (K+1)-th
tie.

Writes bench/results/top_k_ties.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.fidelity import synthetic_hidden_states
from bench.fidelity_families import SHAPES, synthetic_head

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "top_k_ties.json"
# DSpark's and DFlash2's K are small; XPress's top-C (512 by default) is what a refiner reads.
TOPS = (1, 2, 4, 8, 16, 32, 64, 512)


def tied_share(logits: torch.Tensor, top: int, set_only: bool = False) -> float:
    """The share of rows whose ``top + 1`` best values are not all distinct (``set_only``: whose
    ``top``-th and next tie, all a drafter that reads the set needs whole)."""
    best = logits.topk(top + 1, dim=-1).values
    if set_only:
        return float((best[:, -2] <= best[:, -1]).float().mean())
    return float((best[:, :-1] <= best[:, 1:]).any(-1).float().mean())


def run_shape(name: str, args) -> dict:
    vocab, hidden, family = SHAPES[name]
    gen = torch.Generator().manual_seed(args.seed)
    w, _, keep, _ = synthetic_head(vocab, hidden, 0, args.logit_std, gen)
    xs, _, boost = synthetic_hidden_states(w, keep, args.rows, args.logit_std, gen)
    shares = {}
    for kind, x in xs.items():
        logits = F.linear(x.to(torch.bfloat16), w)  # vLLM's BF16 head
        for only, label in ((False, kind), (True, f"{kind}, set only")):
            shares[label] = {str(t): round(tied_share(logits, t, only), 4) for t in TOPS}
            cells = ", ".join(f"K={t} {s:.0%}" for t, s in zip(TOPS, shares[label].values()))
            print(f"  {name} {label}: {cells}", flush=True)
    return {"shape": [vocab, hidden], "family": family, "peaked_logit_boost": boost, **shares}


def print_table(result: dict) -> None:
    print("\nrows handed whole (their K + 1 best BF16 logits tie), by K:\n")
    print("| shape | hidden states | " + " | ".join(f"K={t}" for t in TOPS) + " |")
    print("| --- | --- |" + " ---: |" * len(TOPS))
    for name, entry in result["shapes"].items():
        for kind in ("gaussian", "gaussian, set only", "peaked", "peaked, set only"):
            cells = " | ".join(f"{v:.0%}" for v in entry[kind].values())
            print(f"| {name} | {kind} | {cells} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=["gemma4-assistant", "qwen3-next-80b-a3b"],
                   choices=sorted(SHAPES))  # fmt: skip
    p.add_argument("--rows", type=int, default=256, help="hidden-state rows per kind")
    p.add_argument("--logit-std", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    result = {
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "rows_per_kind": args.rows,
        "bulk_logit_std": args.logit_std,
        "tops": list(TOPS),
        "shapes": {name: run_shape(name, args) for name in args.shapes},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
