"""The facts every rank of one launch must agree on, read from what each rank archived on its
node: the checkpoint its head came from, the head's shape and shards, the drafter, the flag and
the versions that computed it. Pure: works on documents already read (receipts, diagnostics,
boot.json), wherever the boots were kept.

Each rank proved its own shard at start-up and the ranks checked each other over the wire
(``evidence.ranks``); this is the same check made afterwards, from the archived bytes alone, by
someone who trusts neither the wire nor any single node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from draft_head_fp8.evidence.ranks import cross_rank_problems, rank_summary
from draft_head_fp8.settings import EXPERIMENT_ENV

# The versions that decide what a rank computes (python and the kernel may differ by machine).
_VERSIONS = ("vllm", "torch", "draft-head-fp8")


@dataclass(frozen=True)
class RankEvidence:
    """One rank's archived documents: its receipt, its diagnostics, and its node's boot.json."""

    rank: int
    receipt: dict
    diagnostics: dict
    identity: dict


def _checkpoint(e: RankEvidence) -> Any:
    found = (e.diagnostics.get("head") or {}).get("checkpoint")
    if not isinstance(found, dict):
        return found
    # Each rank hashes its own rows; the tensor they are rows of is the same.
    return {k: found.get(k) for k in ("file", "tensor", "dtype", "shape")}


def _head_shape(e: RankEvidence) -> Any:
    r = e.receipt
    return {
        "hidden": r.get("draft_config_hidden_size"),
        "vocab": r.get("draft_config_vocab_size"),
        "padded_vocab": r.get("head_vocab_padded_size"),
        "tp_size": r.get("tp_size", r.get("head_tp_size")),
        "weight_dtype": (r.get("head_weight") or {}).get("dtype"),
        "method": r.get("head_method"),
    }


def _drafter(e: RankEvidence) -> Any:
    return {"family": e.diagnostics.get("family"), "target": e.diagnostics.get("target_class")}


def _flag(e: RankEvidence) -> Any:
    return (e.identity.get("env") or {}).get(EXPERIMENT_ENV)


def _versions(e: RankEvidence) -> Any:
    found = e.identity.get("versions") or {}
    return {name: found.get(name) for name in _VERSIONS}


FACTS = {
    "checkpoint": _checkpoint,
    "head shape": _head_shape,
    "drafter": _drafter,
    "flag": _flag,
    "versions": _versions,
}


def disagreements(ranks: list[RankEvidence]) -> list[str]:
    """One line per fact on which the ranks differ, naming each rank's value."""
    problems = []
    for name, read in FACTS.items():
        values = [(e.rank, read(e)) for e in ranks]
        if len({_key(v) for _, v in values}) > 1:
            said = "; ".join(f"rank {rank} {_key(value)}" for rank, value in values)
            problems.append(f"ranks disagree on the {name}: {said}")
    return problems


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def shard_problems(ranks: list[RankEvidence], tp_size: int) -> list[str]:
    """The start-up check across ranks (``evidence.ranks``), from the archived documents."""
    summaries = []
    for e in ranks:
        validation = e.diagnostics.get("validation") or {}
        summaries.append(
            rank_summary(
                rank=e.receipt.get("tp_rank", e.rank),
                tp_size=e.receipt.get("tp_size", e.receipt.get("head_tp_size")),
                failure=None if validation.get("passed") is True else validation.get("reason"),
                receipt=e.receipt,
                scale=(e.diagnostics.get("head") or {}).get("scale"),
                top_k=(e.diagnostics.get("exact_pick") or {}).get("top_k"),
            )
        )
    return cross_rank_problems(summaries, tp_size)
