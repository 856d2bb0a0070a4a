"""The checks of a later proof (receipt v4): every v3 check of the head as it now serves, with the
phase ``post_update`` in place of ``post_share``, then what only a later proof must show: its
number and update, that the bytes the FP8 copy was made from are the rows it names (a checkpoint
tensor's, or the update's as received), that the plugin wrote nothing of the target while
proving it, and that the FP8 head serves (a head refused after the update serves its BF16 rows,
exact, and its receipt says why: it is a record, not a pass). Labels and messages are the
contract (docs/contract.md, "Receipt v4")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from draft_head_fp8.evidence.checks import (
    ACCEPTED_METHODS,
    V3_CHECKS,
    V3_REQUIRED_KEYS,
    Check,
    get,
)
from draft_head_fp8.evidence.receipt_update import POST_UPDATE, SERVING_FP8, V4_KEYS
from draft_head_fp8.policy import HeadFp8EligibilityError

V4_REQUIRED_KEYS = V3_REQUIRED_KEYS + V4_KEYS
_REPLACED = "phase is post_share"


def _not_numbered(r: Mapping, a: tuple[str, ...]) -> bool:
    proof, update = r.get("proof"), get(r.get("weight_update"), "number")
    return not (type(proof) is int and proof >= 1 and type(update) is int and update >= 1)


def _source_not_rows(r: Mapping, a: tuple[str, ...]) -> bool:
    rows = r.get("head_rows_sha256")
    return not isinstance(rows, str) or get(r.get("head_source"), "sha256") != rows


V4_CHECKS: tuple[Check, ...] = (
    *(c for c in V3_CHECKS if c.label != _REPLACED),
    Check(
        "phase is post_update",
        "receipt phase is not post_update",
        lambda r, a: r.get("phase") != POST_UPDATE,
    ),
    Check(
        "proof and update numbered",
        "later proof does not say its number or the weight update it follows",
        _not_numbered,
    ),
    Check(
        "bytes are the rows named",
        "head source does not vouch for the rows the FP8 copy was made from",
        _source_not_rows,
    ),
    Check(
        "target written only by the update",
        "the target's head or embedding changed while the plugin proved the head again",
        lambda r, a: r.get("target_written_by_plugin") is not False,
    ),
    Check(
        "the FP8 head serves",
        "after the weight update the FP8 head was refused; the BF16 rows serve",
        lambda r, a: r.get("serving") != SERVING_FP8,
    ),
)


def validate_post_update_receipt(
    receipt: Any, *, accepted_methods: Iterable[str] | None = None
) -> None:
    """Raise ``HeadFp8EligibilityError`` unless the receipt proves the re-made FP8 head serves
    the rows the update left, the target untouched by the plugin."""
    accepted = ACCEPTED_METHODS if accepted_methods is None else tuple(accepted_methods)
    try:
        present = receipt if isinstance(receipt, Mapping) else {}
        missing = [key for key in V4_REQUIRED_KEYS if key not in present]
        if missing:
            raise HeadFp8EligibilityError(f"receipt missing {missing}")
        for check in V4_CHECKS:
            if check.fails(receipt, accepted):
                raise HeadFp8EligibilityError(check.message)
    except HeadFp8EligibilityError:
        raise
    except Exception as exc:
        raise HeadFp8EligibilityError(
            f"receipt could not be validated: {type(exc).__name__}: {exc}"
        ) from exc


def update_check_results(receipt: Any) -> list[dict]:
    """Every check of a v4 receipt by label, in order (``passed`` None where keys are missing)."""
    present = receipt if isinstance(receipt, Mapping) else {}
    missing = [key for key in V4_REQUIRED_KEYS if key not in present]
    results = [{"check": "required keys present", "passed": not missing,
                "message": f"receipt missing {missing}" if missing else None}]  # fmt: skip
    for check in V4_CHECKS:
        try:
            passed = None if missing else not check.fails(receipt, ACCEPTED_METHODS)
        except Exception:
            passed = False
        results.append({"check": check.label, "message": check.message, "passed": passed})
    return results
