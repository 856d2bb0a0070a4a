"""The post-share checks: fail-closed validation of a runtime receipt, and the per-check report.

One table per receipt version (v2, then its consistency rows from ``evidence.consistency``; v3
reads six of v2's checks through the weight layout and the tensor-parallel facts, and the
snapshot rows over its stored scale too, then adds its own) serves both the gate
(``validate_post_share_receipt``: the first failing check raises its message) and the report
people read (``check_results``: every check by label with its verdict). Labels, order and
messages are the contract (docs/contract.md); tests name checks by label, never by position.

Whatever it is given, validation raises nothing but ``HeadFp8EligibilityError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from draft_head_fp8.evidence import RECEIPT_V3, consistency
from draft_head_fp8.evidence.receipt_v3 import V3_KEYS
from draft_head_fp8.layouts import LAYOUT_PLAIN, LAYOUTS, kernel_scale_shape, logical_shape
from draft_head_fp8.policy import EXPECTED_METHOD, HeadFp8EligibilityError

# This package's own vLLM head method; a string, so that validation needs no vLLM import.
PACKAGE_METHOD = "DraftHeadFp8LinearMethod"
ACCEPTED_METHODS = (EXPECTED_METHOD, PACKAGE_METHOD)

REQUIRED_KEYS = (
    "eligible",
    "head_class",
    "head_method",
    "head_kernel",
    "head_weight",
    "head_weight_scale",
    "draft_embed",
    "target_embed",
    "head_weight_is_draft_embed",
    "head_weight_is_target_embed",
    "draft_embed_weight_is_target_embed",
    "head_tp_size",
    "head_expected_weight_shape",
    "target_lm_head_weight",
    "target_lm_head_method",
)
KEYS_LABEL = "required keys present"


@dataclass(frozen=True)
class Check:
    label: str
    message: str
    fails: Callable[[Mapping, tuple[str, ...]], bool]  # (receipt, accepted methods) -> failed?


def get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def lower(value: Any) -> str:
    return str(value).lower()


def _target_on_fp8(r: Mapping, accepted: tuple[str, ...]) -> bool:
    # Every FP8 head method we know, not only the accepted ones: the target must be on none.
    return any(name in str(r["target_lm_head_method"]) for name in (*ACCEPTED_METHODS, *accepted))


def _weight_or_scale_incomplete(r: Mapping, a: tuple[str, ...]) -> bool:
    weight, scale = r["head_weight"], r["head_weight_scale"]
    return not weight or not scale or not get(weight, "dtype") or not get(scale, "dtype")


# The v2 checks after the key check, in contract order.
V2_CHECKS: tuple[Check, ...] = (
    Check("eligible", "receipt is not eligible", lambda r, a: r["eligible"] is not True),
    Check(
        "tensor parallel 1",
        "only TP1 is supported by this prototype",
        lambda r, a: r["head_tp_size"] != 1,
    ),
    Check(
        "head dimensions known",
        "draft config did not provide head dimensions",
        lambda r, a: r["head_expected_weight_shape"] is None,
    ),
    Check(
        "draft config dimensions",
        "draft config dimensions are missing",
        lambda r, a: (
            r.get("draft_config_hidden_size") is None or r.get("draft_config_vocab_size") is None
        ),
    ),
    Check(
        "hidden partition = config",
        "head hidden partition does not match draft config",
        lambda r, a: r.get("head_partition_hidden_size") != r["draft_config_hidden_size"],
    ),
    Check(
        "vocab partition = config",
        "head vocab partition does not match draft config",
        lambda r, a: r.get("head_partition_vocab_size") != r["draft_config_vocab_size"],
    ),
    Check(
        "head class",
        "unexpected head class",
        lambda r, a: not str(r["head_class"]).endswith(".ParallelLMHead"),
    ),
    Check(
        "head method",
        "unexpected online head method",
        lambda r, a: not any(r["head_method"] == m for m in a),
    ),
    Check(
        "kernel recorded", "kernel selection was not recorded", lambda r, a: not r["head_kernel"]
    ),
    Check(
        "weight/scale metadata",
        "head FP8 weight/scale metadata is incomplete",
        _weight_or_scale_incomplete,
    ),
    Check(
        "weight/scale finite",
        "head FP8 weight/scale is not finite",
        lambda r, a: (
            get(r["head_weight"], "finite") is not True
            or get(r["head_weight_scale"], "finite") is not True
        ),
    ),
    Check(
        "scale is one positive scalar",
        "head scale is not one finite positive scalar",
        lambda r, a: (
            get(r["head_weight_scale"], "shape") != [1]
            or get(r["head_weight_scale"], "positive_scalar") is not True
        ),
    ),
    Check(
        "weight shape [hidden, vocab]",
        "processed head shape does not match [hidden, vocab] logical shape",
        lambda r, a: get(r["head_weight"], "shape") != r["head_expected_weight_shape"],
    ),
    Check(
        "weight is FP8",
        "head weight is not an FP8 dtype",
        lambda r, a: "float8" not in lower(get(r["head_weight"], "dtype")),
    ),
    Check(
        "head not the draft embedding",
        "head still aliases draft input embedding",
        lambda r, a: r["head_weight_is_draft_embed"] is not False,
    ),
    Check(
        "head not the target embedding",
        "head aliases target input embedding",
        lambda r, a: r["head_weight_is_target_embed"] is not False,
    ),
    Check(
        "draft embedding shared",
        "draft input embedding was not shared with target",
        lambda r, a: r["draft_embed_weight_is_target_embed"] is not True,
    ),
    Check(
        "draft embedding BF16",
        "draft input embedding is not BF16",
        lambda r, a: "bfloat16" not in lower(get(r["draft_embed"], "dtype")),
    ),
    Check("target head not FP8", "target LM head was routed to draft FP8 method", _target_on_fp8),
    Check(
        "target head BF16",
        "target LM head is not BF16",
        lambda r, a: "bfloat16" not in lower(get(r["target_lm_head_weight"], "dtype")),
    ),
    Check(
        "target head unquantized",
        "target LM head is not on an unquantized method",
        lambda r, a: "Unquantized" not in str(r["target_lm_head_method"]),
    ),
) + tuple(Check(*row) for row in consistency.V2_ROWS)


# ---------------------------------------------------------------- v3: read through layout and TP

V3_REQUIRED_KEYS = REQUIRED_KEYS + V3_KEYS


def _is_int(value: Any) -> bool:
    return type(value) is int


def _pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value)


def _shard_inconsistent(r: Mapping, a: tuple[str, ...]) -> bool:
    size, rank, padded = r["tp_size"], r["tp_rank"], r["head_vocab_padded_size"]
    rows, where = r.get("head_partition_vocab_size"), r["head_vocab_range"]
    if not all(_is_int(v) for v in (size, rank, padded, rows)) or not _pair(where):
        return True
    if size < 1 or not 0 <= rank < size or r["head_tp_size"] != size or padded % size:
        return True
    per = padded // size
    return rows != per or where != [rank * per, (rank + 1) * per]


def _vocab_not_config(r: Mapping, a: tuple[str, ...]) -> bool:
    vocab, where, real = (
        r["draft_config_vocab_size"],
        r["head_vocab_range"],
        r["head_real_vocab_range"],
    )
    if not _is_int(vocab) or not _pair(where) or not _pair(real):
        return True
    start, end = where
    # The padded vocabulary must cover the config's, and this shard's real tokens must be its
    # rows clipped to the config's vocabulary: nothing more, nothing less.
    return r["head_vocab_padded_size"] < vocab or real != [min(start, vocab), min(end, vocab)]


def _v3_incomplete(r: Mapping, a: tuple[str, ...]) -> bool:
    stored = r["head_weight_scale_stored"]
    return _weight_or_scale_incomplete(r, a) or not stored or not get(stored, "dtype")


def _v3_not_finite(r: Mapping, a: tuple[str, ...]) -> bool:
    return any(
        get(r[key], "finite") is not True
        for key in ("head_weight", "head_weight_scale", "head_weight_scale_stored")
    )


def _v3_scale(r: Mapping, a: tuple[str, ...]) -> bool:
    stored = r["head_weight_scale_stored"]
    return get(stored, "shape") != [1] or get(stored, "positive_scalar") is not True


def _v3_shape(r: Mapping, a: tuple[str, ...]) -> bool:
    layout, logical = r["head_weight_layout"], r["head_weight_logical_shape"]
    if not _pair(logical) or logical != r["head_expected_weight_shape"]:
        return True
    if layout not in LAYOUTS:
        return False  # the stored shape is unreadable; refused by name in "weight layout known"
    # The stored shape through the layout, which is its own inverse (a transpose or nothing).
    return logical_shape(get(r["head_weight"], "shape"), layout) != logical


def _kernel_scale_not_stored(r: Mapping, a: tuple[str, ...]) -> bool:
    if r["head_kernel_scale_equals_stored"] is not True:
        return True
    shape, hidden = get(r["head_weight_scale"], "shape"), r.get("head_partition_hidden_size")
    if r["head_weight_layout"] == LAYOUT_PLAIN:
        return shape != [1]
    return not _is_int(hidden) or shape != kernel_scale_shape(r["head_weight_layout"], hidden)


# The v2 checks that v3 reads through the layout and the TP facts, by label.
_V3_READINGS: dict[str, Check] = {
    "tensor parallel 1": Check(
        "tensor parallel shard",
        "head TP rank, size and vocab range do not match its partition",
        _shard_inconsistent,
    ),
    "vocab partition = config": Check(
        "vocab partition = config",
        "head vocab partition does not match draft config",
        _vocab_not_config,
    ),
    "weight/scale metadata": Check(
        "weight/scale metadata", "head FP8 weight/scale metadata is incomplete", _v3_incomplete
    ),
    "weight/scale finite": Check(
        "weight/scale finite", "head FP8 weight/scale is not finite", _v3_not_finite
    ),
    "scale is one positive scalar": Check(
        "scale is one positive scalar", "head scale is not one finite positive scalar", _v3_scale
    ),
    "weight shape [hidden, vocab]": Check(
        "weight shape [hidden, vocab]",
        "processed head shape does not match [hidden, vocab] logical shape",
        _v3_shape,
    ),
    # v3 has one snapshot more, the stored scale.
    **{label: Check(label, *rest) for label, *rest in consistency.V3_ROWS},
}
V3_CHECKS: tuple[Check, ...] = tuple(_V3_READINGS.get(c.label, c) for c in V2_CHECKS) + (
    Check(
        "weight layout known",
        "head weight layout is neither plain nor convert_weight_packed",
        lambda r, a: r["head_weight_layout"] not in LAYOUTS,
    ),
    Check(
        "kernel reads the stored scale",
        "head kernel scale does not equal the stored per-tensor scale",
        _kernel_scale_not_stored,
    ),
    Check(*consistency.V3_KERNEL_SCALE),
)


def _is_v3(receipt: Any) -> bool:
    # Only a string can name v3; anything else is judged as v2, whose checks never read schema.
    schema = get(receipt, "schema")
    return type(schema) is str and schema == RECEIPT_V3


def checks_for(receipt: Any) -> tuple[Check, ...]:
    """The table that judges this receipt: v3's when it says it is v3, else v2's (whose checks
    ignore ``schema``, as the overlay's did)."""
    return V3_CHECKS if _is_v3(receipt) else V2_CHECKS


def required_for(receipt: Any) -> tuple[str, ...]:
    return V3_REQUIRED_KEYS if _is_v3(receipt) else REQUIRED_KEYS


def _missing(receipt: Any) -> list[str]:
    present = receipt if isinstance(receipt, Mapping) else {}
    return [key for key in required_for(receipt) if key not in present]


def _accepted(accepted_methods: Iterable[str] | None) -> tuple[str, ...]:
    if accepted_methods is None:
        return ACCEPTED_METHODS
    return tuple(str(m) for m in accepted_methods)


def _validate(receipt: Any, accepted: tuple[str, ...]) -> None:
    missing = _missing(receipt)
    if missing:
        raise HeadFp8EligibilityError(f"receipt missing {missing}")
    for check in checks_for(receipt):
        if check.fails(receipt, accepted):
            raise HeadFp8EligibilityError(check.message)


def validate_post_share_receipt(
    receipt: Any, *, accepted_methods: Iterable[str] | None = None
) -> None:
    """Raise ``HeadFp8EligibilityError`` unless the receipt proves a safe post-share state.

    ``accepted_methods`` may narrow the accepted head methods (default: vLLM's online per-tensor
    FP8 method and this package's). Whatever the input, nothing but that error escapes.
    """
    try:
        _validate(receipt, _accepted(accepted_methods))
    except HeadFp8EligibilityError:
        raise
    except Exception as exc:  # e.g. a value whose __str__ or __eq__ raises
        raise HeadFp8EligibilityError(
            f"receipt could not be validated: {type(exc).__name__}: {exc}"
        ) from exc


def check_results(receipt: Any, *, accepted_methods: Iterable[str] | None = None) -> list[dict]:
    """Every post-share check by label, in order, each with ``passed`` True, False, or None when
    it could not run (keys missing). For reports; ``validate_post_share_receipt`` is the gate."""
    accepted = _accepted(accepted_methods)
    missing = _missing(receipt)
    results = [
        {
            "check": KEYS_LABEL,
            "message": f"receipt missing {missing}" if missing else None,
            "passed": not missing,
        }
    ]
    for check in checks_for(receipt):
        if missing:
            passed = None
        else:
            try:
                passed = not check.fails(receipt, accepted)
            except Exception:
                passed = False
        results.append({"check": check.label, "message": check.message, "passed": passed})
    return results


def messages(receipt_schema: str | None = None) -> dict[str, str]:
    """label -> message for every check of a receipt version (v2 unless v3 is named), in order."""
    table = checks_for({"schema": receipt_schema})
    return {check.label: check.message for check in table}
