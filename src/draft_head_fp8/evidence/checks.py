"""The post-share checks: fail-closed validation of a runtime receipt, and the per-check report.

One table per receipt version serves both the gate (``validate_post_share_receipt``: the first
failing check raises its message) and the report people read (``check_results``: every check by
label with its verdict). Labels, order and messages are the contract (docs/contract.md); tests
name checks by label, never by position.

Whatever it is given, validation raises nothing but ``HeadFp8EligibilityError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
)


def checks_for(receipt: Any) -> tuple[Check, ...]:
    """The table that judges this receipt: by its ``schema`` (anything not v3 is judged as v2,
    whose checks ignore ``schema``, as the overlay's did)."""
    return V2_CHECKS


def _missing(receipt: Any) -> list[str]:
    present = receipt if isinstance(receipt, Mapping) else {}
    return [key for key in REQUIRED_KEYS if key not in present]


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
    """label -> message for every check of a receipt version (v2 unless v3 is named)."""
    table = checks_for({"schema": receipt_schema})
    return {check.label: check.message for check in table}
