"""The runtime receipt: what was observed about the draft head, the embeddings and the target head
(metadata only, never weight values), its fail-closed validation, and its write-once file.

Key names, check order and messages are a contract (SPEC sections 3-5).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from draft_head_fp8.durable import create_exclusive, makedirs_durable
from draft_head_fp8.policy import EXPECTED_METHOD, Eligibility, HeadFp8EligibilityError

RECEIPT_SCHEMA = "draft-head-fp8-runtime-receipt/v2"
# This package's own vLLM head method; kept as a string so validation needs no vLLM import.
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


# ---------------------------------------------------------------- capture


def _call_or_none(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # a snapshot reports what it could not read as None, never raises
        return None


def _recorded_fact(value: Any, name: str) -> bool:
    # An attribute that states the fact, not a method: torch.Tensor has a `positive` method
    # (torch.positive, the identity), and bool() of a bound method is always True.
    return hasattr(value, name) and not callable(getattr(value, name, None))


def tensor_snapshot(value: Any, *, finite: bool = False, positive_scalar: bool = False) -> dict | None:
    if value is None:
        return None
    snapshot: dict[str, Any] = {}
    dtype = getattr(value, "dtype", None)
    snapshot["dtype"] = None if dtype is None else str(dtype)
    shape = getattr(value, "shape", None)
    snapshot["shape"] = None if shape is None else _call_or_none(lambda: [int(d) for d in shape])
    device = getattr(value, "device", None)
    snapshot["device"] = None if device is None else str(device)
    if callable(getattr(value, "numel", None)):
        snapshot["numel"] = _call_or_none(lambda: int(value.numel()))
    if finite:
        if _recorded_fact(value, "finite"):
            snapshot["finite"] = bool(value.finite)
        else:
            from draft_head_fp8.fp8 import is_finite

            snapshot["finite"] = _call_or_none(lambda: is_finite(value))
    if positive_scalar:
        if _recorded_fact(value, "positive"):
            snapshot["positive_scalar"] = bool(value.positive)
        else:
            from draft_head_fp8.fp8 import is_positive_scalar

            snapshot["positive_scalar"] = _call_or_none(lambda: is_positive_scalar(value))
    data_ptr = _call_or_none(lambda: int(value.data_ptr()))
    if data_ptr is not None:
        snapshot["data_ptr"] = data_ptr
    return snapshot


def _config_dim(config: Any, name: str) -> int | None:
    try:
        value = int(getattr(config, name, None))
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value > 0 else None


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _method_name(module: Any) -> str | None:
    method = getattr(module, "quant_method", None)
    return None if method is None else type(method).__name__


def _or(value: Any, fallback: Any) -> Any:
    # Not `value or fallback`: a module that defines __len__ (ModuleList) can be falsy.
    return fallback if value is None else value


def make_runtime_receipt(
    *,
    head: Any,
    draft_model: Any,
    target_model: Any,
    decision: Eligibility,
    phase: str,
    target_lm_head: Any = None,
) -> dict:
    draft_body = _or(getattr(draft_model, "model", None), draft_model)
    draft_embed = getattr(draft_body, "embed_tokens", None)
    get_language_model = getattr(target_model, "get_language_model", None)
    target_lm = get_language_model() if callable(get_language_model) else target_model
    target_head = target_lm_head if target_lm_head is not None else getattr(target_lm, "lm_head", None)
    target_body = _or(getattr(target_lm, "model", None), target_lm)
    target_embed = getattr(target_body, "embed_tokens", None)

    method = getattr(head, "quant_method", None)
    kernel = getattr(method, "fp8_linear", None)
    weight = getattr(head, "weight", None)
    scale = getattr(head, "weight_scale", None)
    draft_embed_weight = getattr(draft_embed, "weight", None)
    target_embed_weight = getattr(target_embed, "weight", None)

    draft_config = getattr(draft_model, "config", None)
    text_config = _or(getattr(draft_config, "text_config", None), draft_config)
    config_hidden = _config_dim(text_config, "hidden_size")
    config_vocab = _config_dim(text_config, "vocab_size")
    partition_hidden = _int_or_none(getattr(head, "input_size_per_partition", None))
    partition_vocab = _int_or_none(getattr(head, "output_size_per_partition", None))
    hidden = config_hidden if config_hidden is not None else partition_hidden
    vocab = config_vocab if config_vocab is not None else partition_vocab

    return {
        "schema": RECEIPT_SCHEMA,
        "phase": phase,
        "eligible": decision.eligible,
        "eligibility_reason": decision.reason,
        "role": decision.role,
        "prefix": decision.prefix,
        "ordered_embeddings": decision.ordered_embeddings,
        "tie_word_embeddings": decision.tie_word_embeddings,
        "quant_spec": decision.quant_spec,
        "head_class": f"{type(head).__module__}.{type(head).__name__}",
        "head_method": None if method is None else type(method).__name__,
        "head_method_module": type(method).__module__,
        "head_kernel": None if kernel is None else type(kernel).__name__,
        "head_tp_size": getattr(head, "tp_size", None),
        "draft_config_hidden_size": config_hidden,
        "draft_config_vocab_size": config_vocab,
        "head_partition_hidden_size": partition_hidden,
        "head_partition_vocab_size": partition_vocab,
        # The processed FP8 weight is stored transposed, [hidden, vocab].
        "head_expected_weight_shape": None if hidden is None or vocab is None else [hidden, vocab],
        "head_weight": tensor_snapshot(weight, finite=True),
        "head_weight_scale": tensor_snapshot(scale, finite=True, positive_scalar=True),
        # No finiteness for the embeddings: that would read another 0.5-3 GiB at every start.
        "draft_embed": tensor_snapshot(draft_embed_weight),
        "target_embed": tensor_snapshot(target_embed_weight),
        "target_lm_head_weight": tensor_snapshot(getattr(target_head, "weight", None)),
        "head_weight_is_draft_embed": weight is not None
        and draft_embed is not None
        and weight is draft_embed_weight,
        "head_weight_is_target_embed": weight is not None
        and target_embed is not None
        and weight is target_embed_weight,
        "draft_embed_weight_is_target_embed": draft_embed is not None
        and target_embed is not None
        and draft_embed_weight is target_embed_weight,
        "draft_embedding_method": _method_name(draft_embed),
        "target_embedding_method": _method_name(target_embed),
        "target_lm_head_method": _method_name(target_head),
    }


# ---------------------------------------------------------------- validation


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _lower(value: Any) -> str:
    return str(value).lower()


def _target_on_fp8(r: Mapping, accepted: tuple[str, ...]) -> bool:
    # Every FP8 head method we know, not only the accepted ones: the target must be on none.
    return any(name in str(r["target_lm_head_method"]) for name in (*ACCEPTED_METHODS, *accepted))


# The post-share checks after the key check, in contract order: (label, message, fails). One
# table serves both the fail-closed validation and the per-check report that people read.
POST_SHARE_CHECKS: tuple[tuple[str, str, Any], ...] = (
    ("eligible", "receipt is not eligible", lambda r, a: r["eligible"] is not True),
    ("tensor parallel 1", "only TP1 is supported by this prototype", lambda r, a: r["head_tp_size"] != 1),
    ("head dimensions known", "draft config did not provide head dimensions",
     lambda r, a: r["head_expected_weight_shape"] is None),
    ("draft config dimensions", "draft config dimensions are missing",
     lambda r, a: r.get("draft_config_hidden_size") is None or r.get("draft_config_vocab_size") is None),
    ("hidden partition = config", "head hidden partition does not match draft config",
     lambda r, a: r.get("head_partition_hidden_size") != r["draft_config_hidden_size"]),
    ("vocab partition = config", "head vocab partition does not match draft config",
     lambda r, a: r.get("head_partition_vocab_size") != r["draft_config_vocab_size"]),
    ("head class", "unexpected head class", lambda r, a: not str(r["head_class"]).endswith(".ParallelLMHead")),
    ("head method", "unexpected online head method", lambda r, a: not any(r["head_method"] == m for m in a)),
    ("kernel recorded", "kernel selection was not recorded", lambda r, a: not r["head_kernel"]),
    ("weight/scale metadata", "head FP8 weight/scale metadata is incomplete",
     lambda r, a: not r["head_weight"] or not r["head_weight_scale"]
     or not _get(r["head_weight"], "dtype") or not _get(r["head_weight_scale"], "dtype")),
    ("weight/scale finite", "head FP8 weight/scale is not finite",
     lambda r, a: _get(r["head_weight"], "finite") is not True or _get(r["head_weight_scale"], "finite") is not True),
    ("scale is one positive scalar", "head scale is not one finite positive scalar",
     lambda r, a: _get(r["head_weight_scale"], "shape") != [1]
     or _get(r["head_weight_scale"], "positive_scalar") is not True),
    ("weight shape [hidden, vocab]", "processed head shape does not match [hidden, vocab] logical shape",
     lambda r, a: _get(r["head_weight"], "shape") != r["head_expected_weight_shape"]),
    ("weight is FP8", "head weight is not an FP8 dtype",
     lambda r, a: "float8" not in _lower(_get(r["head_weight"], "dtype"))),
    ("head not the draft embedding", "head still aliases draft input embedding",
     lambda r, a: r["head_weight_is_draft_embed"] is not False),
    ("head not the target embedding", "head aliases target input embedding",
     lambda r, a: r["head_weight_is_target_embed"] is not False),
    ("draft embedding shared", "draft input embedding was not shared with target",
     lambda r, a: r["draft_embed_weight_is_target_embed"] is not True),
    ("draft embedding BF16", "draft input embedding is not BF16",
     lambda r, a: "bfloat16" not in _lower(_get(r["draft_embed"], "dtype"))),
    ("target head not FP8", "target LM head was routed to draft FP8 method", _target_on_fp8),
    ("target head BF16", "target LM head is not BF16",
     lambda r, a: "bfloat16" not in _lower(_get(r["target_lm_head_weight"], "dtype"))),
    ("target head unquantized", "target LM head is not on an unquantized method",
     lambda r, a: "Unquantized" not in str(r["target_lm_head_method"])),
)


def _missing(receipt: Any) -> list[str]:
    present = receipt if isinstance(receipt, Mapping) else {}
    return [key for key in REQUIRED_KEYS if key not in present]


def _validate(receipt: Any, accepted: tuple[str, ...]) -> None:
    missing = _missing(receipt)
    if missing:
        raise HeadFp8EligibilityError(f"receipt missing {missing}")
    for _, message, fails in POST_SHARE_CHECKS:
        if fails(receipt, accepted):
            raise HeadFp8EligibilityError(message)


def check_results(receipt: Any, *, accepted_methods: Iterable[str] | None = None) -> list[dict]:
    """Every post-share check by name, in order, each with ``passed`` True, False, or None when it
    could not run (keys missing). For reports; ``validate_post_share_receipt`` is the gate."""
    accepted = ACCEPTED_METHODS if accepted_methods is None else tuple(str(m) for m in accepted_methods)
    missing = _missing(receipt)
    results = [{
        "check": "required keys present",
        "message": f"receipt missing {missing}" if missing else None,
        "passed": not missing,
    }]
    for label, message, fails in POST_SHARE_CHECKS:
        if missing:
            passed = None
        else:
            try:
                passed = not fails(receipt, accepted)
            except Exception:
                passed = False
        results.append({"check": label, "message": message, "passed": passed})
    return results


def validate_post_share_receipt(receipt: Any, *, accepted_methods: Iterable[str] | None = None) -> None:
    """Raise ``HeadFp8EligibilityError`` unless the receipt proves a safe post-share state.

    ``accepted_methods`` may narrow the accepted head methods (default: vLLM's online per-tensor
    FP8 method and this package's). Whatever the input, nothing but that error escapes.
    """
    try:
        accepted = ACCEPTED_METHODS if accepted_methods is None else tuple(str(m) for m in accepted_methods)
        _validate(receipt, accepted)
    except HeadFp8EligibilityError:
        raise
    except Exception as exc:  # e.g. a value whose __str__ or __eq__ raises
        raise HeadFp8EligibilityError(
            f"receipt could not be validated: {type(exc).__name__}: {exc}"
        ) from exc


# ---------------------------------------------------------------- write-once file


def receipt_bytes(receipt: Mapping) -> bytes:
    return (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_runtime_receipt(receipt: Mapping, path: str | os.PathLike) -> None:
    """Write the receipt once: creates parents, never overwrites (``FileExistsError``), and leaves
    either no file or the whole file, fsynced with its folder, whatever happens."""
    data = receipt_bytes(receipt)  # serialise first: a bad receipt must not leave a file behind
    target = os.fspath(path)
    if os.path.lexists(target):
        raise FileExistsError(f"receipt already exists, not overwriting: {target}")
    makedirs_durable(os.path.dirname(os.path.abspath(target)))
    create_exclusive(target, data)
