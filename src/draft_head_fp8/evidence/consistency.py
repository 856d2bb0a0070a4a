"""The consistency checks: every field of a receipt held against the others it must agree with.

The checks in ``evidence.checks`` before these prove each fact on its own terms; a receipt can
pass them all and still contradict itself (``phase`` not the post-share one, a refusal reason
beside ``eligible: true``, an identity flag that its tensors' storage belies, ``numel`` that is not
its shape's). Nothing produces such a receipt but a bug or an edit, and neither describes an
engine we may serve. These rows close that gap: each is an invariant every receipt the engine
writes for a safe head satisfies, whatever the family, layout or rank (docs/contract.md,
"Validation" and "Receipt v3").

Rows are ``(label, message, fails)`` with ``fails(receipt, accepted_methods) -> bool``, made
``Check`` rows by ``evidence.checks`` (which this module does not import: the table is one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from draft_head_fp8.evidence import POST_SHARE
from draft_head_fp8.policy import EXPECTED_ONLINE_SPEC

Row = tuple[str, str, Callable[[Mapping, tuple[str, ...]], bool]]

# The only dtypes this package serves, by the exact name the snapshot records (str(torch.dtype)).
# Substrings ("float8" in the name) admitted e5m2, "TORCH.FLOAT8_E4M3FNX" and the like.
HEAD_DTYPE = "torch.float8_e4m3fn"
BF16 = "torch.bfloat16"

V2_SNAPSHOTS = (
    "head_weight",
    "head_weight_scale",
    "draft_embed",
    "target_embed",
    "target_lm_head_weight",
)
V3_SNAPSHOTS = V2_SNAPSHOTS + ("head_weight_scale_stored",)

# The facts a snapshot records of the tensor itself: one tensor, one set of them. (Not dtype:
# each embedding's has its own row, so that a wrong one is named for what it is.)
_TENSOR_FACTS = ("shape", "numel", "device", "data_ptr")


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _is(value: Any, text: str) -> bool:
    # Exactly this string: JSON gives plain str, and a str subclass may compare as it likes.
    return type(value) is str and value == text


def _is_int(value: Any) -> bool:
    return type(value) is int


def _dtype_not(key: str, name: str) -> Callable[[Mapping, tuple[str, ...]], bool]:
    return lambda r, a: not _is(_get(r[key], "dtype"), name)


def _decision_contradicts(r: Mapping, a: tuple[str, ...]) -> bool:
    # What the policy must have seen to say eligible (docs/contract.md, "Policy"). Not
    # tie_word_embeddings: a head shared with the target is eligible untied.
    prefix = r.get("prefix")
    return (
        r.get("ordered_embeddings") is not False
        or not _is(r.get("quant_spec"), EXPECTED_ONLINE_SPEC)
        or not (type(prefix) is str and _names_a_head(prefix))
    )


def _names_a_head(prefix: str) -> bool:
    # A drafter's head, or one of the heads it keeps per draft layer (Step3p5MTP's).
    return prefix.rsplit(".", 1)[-1] == "lm_head" or prefix.endswith(".shared_head.head")


def _embedding_not_one_tensor(r: Mapping, a: tuple[str, ...]) -> bool:
    # draft_embed_weight_is_target_embed is True by now (its own check): the same object, so one
    # snapshot, which must be there and be read from storage that exists.
    draft, target = r["draft_embed"], r["target_embed"]
    if not isinstance(draft, Mapping) or not isinstance(target, Mapping):
        return True
    if not _is_int(draft.get("data_ptr")) or not _is_int(target.get("data_ptr")):
        return True
    return any(draft.get(fact) != target.get(fact) for fact in _TENSOR_FACTS)


def _head_storage_shared(r: Mapping, a: tuple[str, ...]) -> bool:
    # The head is neither embedding (its flags say so by now), so its storage is its own: an FP8
    # copy cannot start where a live BF16 tensor does unless it is a view of it.
    ptr = _get(r["head_weight"], "data_ptr")
    if not _is_int(ptr):
        return True
    others = ("draft_embed", "target_embed", "target_lm_head_weight")
    return any(_get(r[key], "data_ptr") == ptr for key in others)


def _numel_wrong(snapshot: Any) -> bool:
    shape, numel = _get(snapshot, "shape"), _get(snapshot, "numel")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        return True
    return not _is_int(numel) or math.prod(shape) != numel


def _numel_not_shape(keys: tuple[str, ...]) -> Callable[[Mapping, tuple[str, ...]], bool]:
    return lambda r, a: any(_numel_wrong(r[key]) for key in keys)


def _positive_not_one(keys: tuple[str, ...]) -> Callable[[Mapping, tuple[str, ...]], bool]:
    # positive_scalar means exactly one element, finite and > 0 (docs/contract.md, "Receipt v2").
    return lambda r, a: any(
        _get(r[key], "positive_scalar") is True and _get(r[key], "numel") != 1 for key in keys
    )


def _kernel_scale_contradicts(r: Mapping, a: tuple[str, ...]) -> bool:
    # The kernel scale equals the stored one, a positive scalar, in every element: so when it has
    # one element it is that positive scalar. A packed head's [1, k-blocks] scale has more than
    # one where hidden > 128; positive_scalar is then False, and says nothing against it.
    scale = r["head_weight_scale"]
    positive = _get(scale, "positive_scalar")
    if r["head_kernel_scale_equals_stored"] is not True or type(positive) is not bool:
        return True
    return _get(scale, "numel") == 1 and positive is not True


def _not(key: str, text: str) -> Callable[[Mapping, tuple[str, ...]], bool]:
    # Read with .get: these keys are not among the overlay's required ones, and absence fails.
    return lambda r, a: not _is(r.get(key), text)


def rows(snapshots: tuple[str, ...]) -> tuple[Row, ...]:
    """The consistency rows of a receipt version whose tensor snapshots are ``snapshots``."""
    return (
        ("phase is post_share", "receipt phase is not post_share", _not("phase", POST_SHARE)),
        ("role is draft", "receipt role is not draft", _not("role", "draft")),
        (
            "reason says eligible",
            "eligibility reason contradicts eligible",
            _not("eligibility_reason", "eligible"),
        ),
        (
            "decision facts eligible",
            "receipt decision facts contradict eligible",
            _decision_contradicts,
        ),
        (
            "draft embedding is the target's",
            "draft and target embedding snapshots are not one tensor",
            _embedding_not_one_tensor,
        ),
        (
            "head storage its own",
            "head weight storage is an embedding's or the target LM head's",
            _head_storage_shared,
        ),
        (
            "weight dtype exact",
            f"head weight dtype is not {HEAD_DTYPE}",
            _dtype_not("head_weight", HEAD_DTYPE),
        ),
        (
            "draft embedding dtype exact",
            f"draft input embedding dtype is not {BF16}",
            _dtype_not("draft_embed", BF16),
        ),
        (
            "target embedding dtype exact",
            f"target input embedding dtype is not {BF16}",
            _dtype_not("target_embed", BF16),
        ),
        (
            "target head dtype exact",
            f"target LM head dtype is not {BF16}",
            _dtype_not("target_lm_head_weight", BF16),
        ),
        (
            "numel = product of shape",
            "tensor snapshot numel is not the product of its shape",
            _numel_not_shape(snapshots),
        ),
        (
            "positive scalar is one element",
            "tensor snapshot says positive scalar but does not hold one element",
            _positive_not_one(snapshots),
        ),
    )


V2_ROWS = rows(V2_SNAPSHOTS)
V3_ROWS = rows(V3_SNAPSHOTS)
# v3's own, after its kernel-scale check.
V3_KERNEL_SCALE: Row = (
    "kernel scale is the stored scalar",
    "head kernel scale facts contradict the stored scale it equals",
    _kernel_scale_contradicts,
)
