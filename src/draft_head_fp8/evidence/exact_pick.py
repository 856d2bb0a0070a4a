"""The exact draft-token pick's evidence (docs/contract.md, "Exact draft tokens"): what the FP8
head rescores its top-k from, recorded in the diagnostics record and checked fail-closed at the
same point as the receipt. The receipt itself keeps describing the FP8 weight.

The rows must be the BF16 tensor that provenance hashed against the checkpoint (same storage,
shape and dtype). Where the drafter keeps its own head (``rows_source`` "draft"), that is none of
the target's tensors: after the share, not even the draft's embedding, which is then the
target's. Where the drafter reads the target's head ("target_lm_head"), it is that head's very
weight, read in place, so that no BF16 copy is added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.checks import Check, get
from draft_head_fp8.evidence.snapshot import call_or_none, tensor_snapshot
from draft_head_fp8.families.family import Modules
from draft_head_fp8.settings import MAX_RESCORE_TOPK, WIDE_RESCORE_TOPK

ROWS_FROM_DRAFT = "draft"  # the drafter's own head's rows
ROWS_FROM_TARGET_HEAD = "target_lm_head"  # the target head's weight, shared
ROWS_SOURCES = (ROWS_FROM_DRAFT, ROWS_FROM_TARGET_HEAD)


def guarantee(
    k: int, draft_sample_method: Any, certified: bool = False, top_k: int | None = None
) -> str:
    """What the mode guarantees, in one sentence, for the start-up log and the record. "Always"
    only where the certificate is on, with what it rests on (docs/certificate.md). A top-K reader
    (``top_k``) reads no probability from the tail: its K values are the BF16 head's, so what it
    drafts is exact however it samples (``top_k_rows``)."""
    if k == 0:
        return "plain FP8 logits: draft tokens may differ from the BF16 head's"
    if top_k is not None and certified:
        return (
            f"top-{top_k} drafting: every candidate set the drafter reads is the BF16 head's "
            f"best {top_k}, ids and values, always (certified, or the row as vLLM's own BF16 "
            "head computes it where a tie decides the set), greedy or probabilistic"
        )
    greedy = str(draft_sample_method or "greedy") == "greedy"
    if greedy and certified:
        return (
            f"greedy drafting: every draft token is the BF16 head's, always: each pick certified "
            f"by the FP8 top-{k}, else the top-{WIDE_RESCORE_TOPK}, rescored against a proven "
            "bound on every FP8 logit's error, or served from the BF16 rows (lowest index wins "
            "ties; under a CUDA graph a row the wider rescoring leaves uncertified is served by "
            "it and counted)"
        )
    if greedy:
        return (
            f"greedy drafting: each draft token is the BF16 head's whenever it is among the FP8 "
            f"top-{k} (exact rescoring)"
        )
    bounded = (
        "; every other logit is within the proven bound of its BF16 value (docs/certificate.md)"
        if certified
        else ""
    )
    return (
        f"{draft_sample_method} drafting: the top-{k} logits are the BF16 head's, the tail is FP8 "
        f"clamped below them, so draft probabilities are not exactly BF16's{bounded}"
    )


def _weight(module: Any) -> Any:
    return getattr(module, "weight", None)


def _same_storage(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return False
    return call_or_none(lambda: a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def pick_record(
    *, method: Any, modules: Modules, draft_sample_method: Any, rows_source: str = ROWS_FROM_DRAFT
) -> dict:
    k = int(getattr(method, "rescore_k", 0) or 0)
    rows = getattr(method, "rescore_rows", None)
    load = getattr(method, "diagnostics", {}) or {}
    checkpoint = load.get("checkpoint") or {}
    target_embed = _weight(modules.target_embed)
    target_head = _weight(modules.target_head)
    draft_embed = _weight(modules.draft_embed)
    return {
        "top_k": k,
        "rows_source": rows_source,
        "draft_sample_method": str(draft_sample_method or "greedy"),
        "guarantee": guarantee(
            k,
            draft_sample_method,
            bool(getattr(method, "certified", False)),
            getattr(method, "top_k", None),
        ),
        "rows": tensor_snapshot(rows),
        "real_rows": getattr(method, "real_rows", None),
        # The tensor provenance hashed at load, still: its storage and shape, unchanged.
        "rows_are_hashed_source": rows is not None
        and call_or_none(lambda: rows.data_ptr()) == load.get("source_data_ptr")
        and call_or_none(lambda: [int(d) for d in rows.shape]) == load.get("source_shape"),
        "rows_sha256": load.get("source_sha256") if rows is not None else None,
        "rows_sha256_equals_checkpoint": rows is not None
        and load.get("source_sha256") is not None
        and load.get("source_sha256") == checkpoint.get("sha256"),
        "rows_is_draft_embed": rows is not None and rows is draft_embed,
        "rows_is_target_embed": rows is not None and rows is target_embed,
        "rows_is_target_lm_head": rows is not None and rows is target_head,
        "rows_share_storage_with_target": rows is not None
        and bool(_same_storage(rows, target_embed) or _same_storage(rows, target_head)),
    }


def _k(r: Mapping) -> Any:
    return get(r, "top_k")


def _rescoring(r: Mapping) -> bool:
    return type(_k(r)) is int and _k(r) > 0


def _source(r: Mapping) -> Any:
    # Records from before the shared-head families carry no source: their rows were the draft's.
    return get(r, "rows_source") if "rows_source" in r else ROWS_FROM_DRAFT


def _from_draft(r: Mapping) -> bool:
    return _rescoring(r) and _source(r) == ROWS_FROM_DRAFT


PICK_CHECKS: tuple[Check, ...] = (
    Check(
        "top-k in range",
        "exact pick top-k is out of range",
        lambda r, a: type(_k(r)) is not int or not 0 <= _k(r) <= MAX_RESCORE_TOPK,
    ),
    Check(
        "rows kept only to rescore",
        "exact pick rows are missing, or kept without rescoring",
        lambda r, a: _rescoring(r) != isinstance(get(r, "rows"), Mapping),
    ),
    Check(
        "rows are BF16",
        "exact pick rows are not BF16",
        lambda r, a: _rescoring(r) and "bfloat16" not in str(get(get(r, "rows"), "dtype")).lower(),
    ),
    Check(
        "rows are the checkpoint's bytes",
        "exact pick rows are not the tensor hashed against the checkpoint",
        lambda r, a: (
            _rescoring(r)
            and (
                get(r, "rows_are_hashed_source") is not True
                or get(r, "rows_sha256_equals_checkpoint") is not True
            )
        ),
    ),
    Check(
        "rows are none of the target's",
        "exact pick rows alias the draft or target embedding or the target head",
        lambda r, a: (
            _from_draft(r)
            and any(
                get(r, key) is not False
                for key in (
                    "rows_is_draft_embed",
                    "rows_is_target_embed",
                    "rows_is_target_lm_head",
                    "rows_share_storage_with_target",
                )
            )
        ),
    ),
    Check(
        "rows source known",
        "exact pick rows come from neither the draft head nor the target head",
        lambda r, a: _source(r) not in ROWS_SOURCES,
    ),
    Check(
        "rows are the target head's weight",
        "exact pick rows are not the target LM head's own weight",
        lambda r, a: (
            _rescoring(r)
            and _source(r) == ROWS_FROM_TARGET_HEAD
            and get(r, "rows_is_target_lm_head") is not True
        ),
    ),
)


def validate_pick(record: Any) -> None:
    """Raise ``HeadFp8EligibilityError`` unless the exact pick's facts prove safe rows."""
    try:
        for check in PICK_CHECKS:
            if check.fails(record if isinstance(record, Mapping) else {}, ()):
                raise HeadFp8EligibilityError(check.message)
    except HeadFp8EligibilityError:
        raise
    except Exception as exc:
        raise HeadFp8EligibilityError(f"exact pick facts could not be validated: {exc}") from exc


def pick_results(record: Any) -> list[dict]:
    results = []
    for check in PICK_CHECKS:
        try:
            passed = not check.fails(record if isinstance(record, Mapping) else {}, ())
        except Exception:
            passed = False
        results.append({"check": check.label, "message": check.message, "passed": passed})
    return results
