"""Fail-closed validation (docs/contract.md, "Validation"): every check, triggered alone from a
valid receipt with its exact message, their order, and property tests: nothing but
``HeadFp8EligibilityError`` escapes, and no change to a gated field is accepted. The consistency
rows at the end of the table are changes to the overlay's contract, made on purpose; what the
overlay accepted and they refuse is pinned below.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping

import pytest
from contract_rows import CONSISTENCY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draft_head_fp8 import (
    EXPECTED_METHOD,
    HeadFp8EligibilityError,
    schemas,
    validate_post_share_receipt,
)

H, V = 1024, 262144
REQUIRED = [
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
]
PACKAGE_METHOD = "DraftHeadFp8LinearMethod"
ACCEPTED = (EXPECTED_METHOD, PACKAGE_METHOD)
SNAPSHOT_KEYS = (
    "head_weight",
    "head_weight_scale",
    "draft_embed",
    "target_embed",
    "target_lm_head_weight",
)


def bf16_snapshot(ptr):
    return {
        "dtype": "torch.bfloat16",
        "shape": [V, H],
        "device": "cpu",
        "numel": V * H,
        "data_ptr": ptr,
    }


def valid_receipt():
    """What make_runtime_receipt gives after a correct post-share start (30 keys)."""
    shared = bf16_snapshot(4096)
    return {
        "schema": "draft-head-fp8-runtime-receipt/v2",
        "phase": "post_share",
        "eligible": True,
        "eligibility_reason": "eligible",
        "role": "draft",
        "prefix": "draft_model.lm_head",
        "ordered_embeddings": False,
        "tie_word_embeddings": True,
        "quant_spec": "fp8_per_tensor_static",
        "head_class": "vllm.model_executor.layers.vocab_parallel_embedding.ParallelLMHead",
        "head_method": EXPECTED_METHOD,
        "head_method_module": "vllm.model_executor.layers.quantization.online.fp8",
        "head_kernel": "PerTensorTorchFP8ScaledMMLinearKernel",
        "head_tp_size": 1,
        "draft_config_hidden_size": H,
        "draft_config_vocab_size": V,
        "head_partition_hidden_size": H,
        "head_partition_vocab_size": V,
        "head_expected_weight_shape": [H, V],
        "head_weight": {
            "dtype": "torch.float8_e4m3fn",
            "shape": [H, V],
            "device": "cpu",
            "numel": H * V,
            "finite": True,
            "data_ptr": 1024,
        },
        "head_weight_scale": {
            "dtype": "torch.float32",
            "shape": [1],
            "device": "cpu",
            "numel": 1,
            "finite": True,
            "positive_scalar": True,
            "data_ptr": 2048,
        },
        "draft_embed": dict(shared),
        "target_embed": dict(shared),
        "target_lm_head_weight": dict(shared),
        "head_weight_is_draft_embed": False,
        "head_weight_is_target_embed": False,
        "draft_embed_weight_is_target_embed": True,
        "draft_embedding_method": "UnquantizedEmbeddingMethod",
        "target_embedding_method": "UnquantizedEmbeddingMethod",
        "target_lm_head_method": "UnquantizedEmbeddingMethod",
    }


def message_of(receipt, **kwargs):
    try:
        validate_post_share_receipt(receipt, **kwargs)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


def test_fixture_is_valid_and_matches_schema():
    receipt = valid_receipt()
    assert len(receipt) == 30
    assert schemas.errors("runtime-receipt-v2", receipt) == []
    assert validate_post_share_receipt(receipt) is None
    assert validate_post_share_receipt(copy.deepcopy(receipt)) is None


# ---------------------------------------------------------------- every check, one at a time


def setw(key, inner, value):
    def mutate(r):
        r[key][inner] = value

    return mutate


def put(key, value):
    def mutate(r):
        r[key] = value

    return mutate


def drop(key):
    def mutate(r):
        del r[key]

    return mutate


# The checks after the key check, by label, in contract order (docs/contract.md), with their
# exact messages.
MESSAGES = {
    "eligible": "receipt is not eligible",
    "tensor parallel 1": "only TP1 is supported by this prototype",
    "head dimensions known": "draft config did not provide head dimensions",
    "draft config dimensions": "draft config dimensions are missing",
    "hidden partition = config": "head hidden partition does not match draft config",
    "vocab partition = config": "head vocab partition does not match draft config",
    "head class": "unexpected head class",
    "head method": "unexpected online head method",
    "kernel recorded": "kernel selection was not recorded",
    "weight/scale metadata": "head FP8 weight/scale metadata is incomplete",
    "weight/scale finite": "head FP8 weight/scale is not finite",
    "scale is one positive scalar": "head scale is not one finite positive scalar",
    "weight shape [hidden, vocab]": (
        "processed head shape does not match [hidden, vocab] logical shape"
    ),
    "weight is FP8": "head weight is not an FP8 dtype",
    "head not the draft embedding": "head still aliases draft input embedding",
    "head not the target embedding": "head aliases target input embedding",
    "draft embedding shared": "draft input embedding was not shared with target",
    "draft embedding BF16": "draft input embedding is not BF16",
    "target head not FP8": "target LM head was routed to draft FP8 method",
    "target head BF16": "target LM head is not BF16",
    "target head unquantized": "target LM head is not on an unquantized method",
    # The consistency rows (contract_rows.py): every field held against the others.
    **CONSISTENCY,
}

# check -> mutations that fail that check and nothing before it (from the valid fixture)
ALONE = {
    "eligible": [
        put("eligible", False),
        put("eligible", None),
        put("eligible", 1),
        put("eligible", "true"),
    ],
    "tensor parallel 1": [
        put("head_tp_size", 2),
        put("head_tp_size", None),
        put("head_tp_size", "1"),
        put("head_tp_size", 0),
    ],
    "head dimensions known": [put("head_expected_weight_shape", None)],
    "draft config dimensions": [
        put("draft_config_hidden_size", None),
        put("draft_config_vocab_size", None),
        drop("draft_config_hidden_size"),
        drop("draft_config_vocab_size"),
    ],
    "hidden partition = config": [
        put("head_partition_hidden_size", 512),
        put("head_partition_hidden_size", None),
        drop("head_partition_hidden_size"),
    ],
    "vocab partition = config": [
        put("head_partition_vocab_size", V - 1),
        put("head_partition_vocab_size", None),
        drop("head_partition_vocab_size"),
    ],
    "head class": [
        put("head_class", "vllm.VocabParallelEmbedding"),
        put("head_class", "ParallelLMHead"),
        put("head_class", "x.ParallelLMHead.y"),
        put("head_class", None),
    ],
    "head method": [
        put("head_method", "UnquantizedEmbeddingMethod"),
        put("head_method", None),
        put("head_method", EXPECTED_METHOD + "X"),
        put("head_method", EXPECTED_METHOD.lower()),
        put("head_method", [EXPECTED_METHOD]),
    ],
    "kernel recorded": [put("head_kernel", None), put("head_kernel", ""), put("head_kernel", 0)],
    "weight/scale metadata": [
        put("head_weight", None),
        put("head_weight", {}),
        put("head_weight", "torch.float8_e4m3fn"),
        put("head_weight", [1]),
        setw("head_weight", "dtype", None),
        setw("head_weight", "dtype", ""),
        put("head_weight_scale", None),
        put("head_weight_scale", {}),
        setw("head_weight_scale", "dtype", None),
        lambda r: r["head_weight"].pop("dtype"),
    ],
    "weight/scale finite": [
        setw("head_weight", "finite", False),
        setw("head_weight", "finite", None),
        setw("head_weight", "finite", 1),
        setw("head_weight_scale", "finite", False),
        setw("head_weight_scale", "finite", None),
    ],
    "scale is one positive scalar": [
        setw("head_weight_scale", "shape", [1, 1]),
        setw("head_weight_scale", "shape", [2]),
        setw("head_weight_scale", "shape", []),
        setw("head_weight_scale", "shape", None),
        setw("head_weight_scale", "positive_scalar", False),
        setw("head_weight_scale", "positive_scalar", None),
    ],
    "weight shape [hidden, vocab]": [
        setw("head_weight", "shape", [V, H]),  # not transposed
        setw("head_weight", "shape", None),
        setw("head_weight", "shape", [H, V, 1]),
        put("head_expected_weight_shape", [V, H]),
    ],
    "weight is FP8": [
        setw("head_weight", "dtype", "torch.bfloat16"),
        setw("head_weight", "dtype", "torch.int8"),
        setw("head_weight", "dtype", "fp8"),
    ],
    "head not the draft embedding": [
        put("head_weight_is_draft_embed", True),
        put("head_weight_is_draft_embed", None),
        put("head_weight_is_draft_embed", 0),
    ],
    "head not the target embedding": [
        put("head_weight_is_target_embed", True),
        put("head_weight_is_target_embed", None),
    ],
    "draft embedding shared": [
        put("draft_embed_weight_is_target_embed", False),
        put("draft_embed_weight_is_target_embed", None),
        put("draft_embed_weight_is_target_embed", 1),
    ],
    "draft embedding BF16": [
        setw("draft_embed", "dtype", "torch.float16"),
        setw("draft_embed", "dtype", "torch.float8_e4m3fn"),
        put("draft_embed", None),
        put("draft_embed", "torch.bfloat16"),  # a snapshot must be a mapping
    ],
    "target head not FP8": [
        put("target_lm_head_method", EXPECTED_METHOD),
        put("target_lm_head_method", PACKAGE_METHOD),
        put("target_lm_head_method", "Unquantized+" + EXPECTED_METHOD),
    ],
    "target head BF16": [
        setw("target_lm_head_weight", "dtype", "torch.float8_e4m3fn"),
        setw("target_lm_head_weight", "dtype", "torch.float32"),
        put("target_lm_head_weight", None),
    ],
    "target head unquantized": [
        put("target_lm_head_method", "Fp8LinearMethod"),
        put("target_lm_head_method", None),
        put("target_lm_head_method", "unquantizedEmbeddingMethod"),
    ],
    "phase is post_share": [
        put("phase", "pre_share"),
        put("phase", "POST_SHARE"),
        put("phase", "post_share "),
        put("phase", None),
        drop("phase"),
    ],
    "role is draft": [put("role", "target"), put("role", None), drop("role")],
    "reason says eligible": [
        put("eligibility_reason", "ordered embeddings bypass LogitsProcessor.quant_method.apply"),
        put("eligibility_reason", ""),
        put("eligibility_reason", "Eligible"),
        drop("eligibility_reason"),
    ],
    "decision facts eligible": [
        put("ordered_embeddings", True),
        put("ordered_embeddings", None),
        drop("ordered_embeddings"),
        put("quant_spec", None),
        put("quant_spec", "fp8_per_tensor_dynamic"),
        put("prefix", "draft_model.embed_tokens"),
        put("prefix", None),
        drop("prefix"),
    ],
    "draft embedding is the target's": [
        put("target_embed", None),  # the overlay checked its presence only
        setw("draft_embed", "data_ptr", 8192),
        setw("target_embed", "data_ptr", None),
        # 1 == True, but no storage is at address `true`.
        lambda r: (r["draft_embed"].update(data_ptr=1), r["target_embed"].update(data_ptr=True)),
        lambda r: (r["draft_embed"].pop("data_ptr"), r["target_embed"].pop("data_ptr")),
        setw("target_embed", "shape", [H, V]),
        setw("target_embed", "device", "cuda:0"),
        put("target_embed", "torch.bfloat16"),
    ],
    "head storage its own": [
        setw("head_weight", "data_ptr", 4096),  # where the embeddings start
        setw("target_lm_head_weight", "data_ptr", 1024),
        setw("head_weight", "data_ptr", None),
        lambda r: r["head_weight"].pop("data_ptr"),
    ],
    "weight dtype exact": [
        setw("head_weight", "dtype", "torch.float8_e5m2"),
        setw("head_weight", "dtype", "TORCH.FLOAT8_E4M3FN"),
        setw("head_weight", "dtype", "torch.float8_e4m3fnx"),
        setw("head_weight", "dtype", "torch.float8_e4m3fnuz"),
        setw("head_weight", "dtype", "float8_e4m3fn"),
    ],
    "draft embedding dtype exact": [
        setw("draft_embed", "dtype", "torch.bfloat16x"),
        setw("draft_embed", "dtype", "BFloat16"),
    ],
    "target embedding dtype exact": [
        setw("target_embed", "dtype", "torch.float8_e4m3fn"),
        setw("target_embed", "dtype", ""),
        setw("target_embed", "dtype", None),
        setw("target_embed", "dtype", "torch.bfloat16x"),
    ],
    "target head dtype exact": [
        setw("target_lm_head_weight", "dtype", "torch.bfloat16x"),
        setw("target_lm_head_weight", "dtype", "TORCH.BFLOAT16"),
    ],
    "numel = product of shape": [
        setw("head_weight", "numel", H * V - 1),
        setw("head_weight", "numel", None),
        lambda r: r["head_weight"].pop("numel"),
        setw("head_weight_scale", "numel", 2),
        setw("head_weight_scale", "numel", True),
        setw("head_weight_scale", "numel", 1.0),
        lambda r: (
            r["draft_embed"].__setitem__("numel", 5),
            r["target_embed"].__setitem__("numel", 5),
        ),
        setw("target_lm_head_weight", "numel", None),
        setw("target_lm_head_weight", "shape", [V]),
    ],
    "positive scalar is one element": [
        setw("head_weight", "positive_scalar", True),
        setw("target_lm_head_weight", "positive_scalar", True),
    ],
}

ORDER = list(MESSAGES)
CASES = [(check, i, m) for check, ms in ALONE.items() for i, m in enumerate(ms)]


@pytest.mark.parametrize("check, index, mutate", CASES, ids=[f"{c}-{i}" for c, i, _ in CASES])
def test_each_check_alone(check, index, mutate):
    receipt = valid_receipt()
    mutate(receipt)
    assert message_of(receipt) == MESSAGES[check]


def test_every_check_has_a_case():
    assert list(ALONE) == ORDER
    assert all(ALONE.values())


def test_the_package_table_is_the_contract():
    from draft_head_fp8.evidence.checks import messages

    assert messages() == MESSAGES  # labels, messages and their order


@pytest.mark.parametrize("key", REQUIRED)
def test_check1_single_missing_key(key):
    receipt = valid_receipt()
    del receipt[key]
    assert message_of(receipt) == f"receipt missing [{key!r}]"


def test_check1_lists_missing_keys_in_spec_order():
    receipt = valid_receipt()
    for key in ("target_lm_head_method", "eligible", "head_tp_size", "draft_embed"):
        del receipt[key]
    assert message_of(receipt) == (
        "receipt missing ['eligible', 'draft_embed', 'head_tp_size', 'target_lm_head_method']"
    )
    assert message_of({}) == f"receipt missing {REQUIRED!r}"


@pytest.mark.parametrize(
    "receipt", [None, [], "receipt", 42, 3.5, b"{}", [("eligible", True)], object()]
)
def test_check1_non_mapping(receipt):
    assert message_of(receipt) == f"receipt missing {REQUIRED!r}"


def test_check1_wins_over_everything():
    receipt = valid_receipt()
    for check in reversed(ORDER):
        ALONE[check][0](receipt)
    del receipt["head_kernel"]
    assert message_of(receipt) == "receipt missing ['head_kernel']"


@pytest.mark.parametrize("check", ORDER)
def test_first_failing_check_wins(check):
    # Break this check and every later one (applied from last to first, so that where two
    # mutations touch the same key the earlier check's wins): this check's message is reported.
    receipt = valid_receipt()
    for later in reversed(ORDER[ORDER.index(check) :]):
        ALONE[later][0](receipt)
    assert message_of(receipt) == MESSAGES[check]


def test_accepted_equivalents_pass():
    ok = [
        put("head_method", PACKAGE_METHOD),
        put("head_kernel", "anything truthy"),
        put("head_class", "my.pkg.ParallelLMHead"),
        put("target_lm_head_method", "UnquantizedLinearMethod"),
        put("head_tp_size", 1.0),  # == 1
        put("prefix", "lm_head"),  # the policy reads its last component
        put("tie_word_embeddings", False),  # a head shared with the target is eligible untied
        drop("schema"),  # not among the checked facts
        drop("draft_embedding_method"),
        setw("head_weight", "device", "cuda:0"),
        # Both embeddings elsewhere, together: still one tensor, still not the head's storage.
        lambda r: (r["draft_embed"].update(data_ptr=8192), r["target_embed"].update(data_ptr=8192)),
        setw("target_lm_head_weight", "data_ptr", 2048),  # an untied target head, anywhere else
    ]
    for mutate in ok:
        receipt = valid_receipt()
        mutate(receipt)
        assert message_of(receipt) is None


# What the overlay accepted and the consistency rows refuse, on purpose (docs/contract.md,
# "Validation": changes to the overlay's contract).
OVERLAY_ACCEPTED_NOW_REFUSED = [
    (setw("head_weight", "dtype", "TORCH.FLOAT8_E5M2"), "weight dtype exact"),
    (setw("draft_embed", "dtype", "BFloat16"), "draft embedding dtype exact"),
    (put("target_embed", None), "draft embedding is the target's"),
    (put("phase", "pre_share"), "phase is post_share"),
    (drop("phase"), "phase is post_share"),
    (put("role", "target"), "role is draft"),
    (put("eligibility_reason", "role is not draft"), "reason says eligible"),
    (put("ordered_embeddings", True), "decision facts eligible"),
    (setw("head_weight", "data_ptr", 4096), "head storage its own"),
    (setw("head_weight", "numel", 7), "numel = product of shape"),
    (setw("head_weight", "shape", [H, float(V)]), "numel = product of shape"),
    (setw("head_weight_scale", "shape", [1.0]), "numel = product of shape"),
]


@pytest.mark.parametrize("mutate, label", OVERLAY_ACCEPTED_NOW_REFUSED)
def test_what_the_overlay_accepted_and_the_contract_now_refuses(mutate, label):
    receipt = valid_receipt()
    mutate(receipt)
    assert message_of(receipt) == MESSAGES[label]


def test_accepted_methods_can_narrow():
    receipt = valid_receipt()
    assert message_of(receipt, accepted_methods=[EXPECTED_METHOD]) is None
    assert message_of(receipt, accepted_methods=[PACKAGE_METHOD]) == "unexpected online head method"
    assert message_of(receipt, accepted_methods=[]) == "unexpected online head method"
    receipt["head_method"] = PACKAGE_METHOD
    assert message_of(receipt, accepted_methods=(m for m in [PACKAGE_METHOD])) is None
    assert (
        message_of(receipt, accepted_methods=[EXPECTED_METHOD]) == "unexpected online head method"
    )


def test_target_is_refused_on_any_known_fp8_head_method_even_when_narrowed():
    for method in (EXPECTED_METHOD, PACKAGE_METHOD, "MyFp8Method"):
        receipt = valid_receipt()
        receipt["target_lm_head_method"] = f"Unquantized{method}"
        assert (
            message_of(receipt, accepted_methods=[EXPECTED_METHOD, "MyFp8Method"])
            == "target LM head was routed to draft FP8 method"
        )


# ---------------------------------------------------------------- hostile values


class Hostile:
    """Every protocol the validator might touch raises."""

    def _boom(self, *args, **kwargs):
        raise RuntimeError("hostile")

    __str__ = __repr__ = __eq__ = __ne__ = __bool__ = __len__ = __lower__ = _boom
    __hash__ = object.__hash__

    def __getattr__(self, name):
        raise RuntimeError(f"hostile {name}")


class BadStr:
    def __str__(self):
        return 42  # str() raises TypeError


class HostileMapping(Mapping):
    def __init__(self, data, fail_on):
        self._data = data
        self._fail_on = fail_on

    def __getitem__(self, key):
        if "getitem" in self._fail_on:
            raise KeyError("hostile")  # a lying mapping: says the key is there, then it is not
        return self._data[key]

    def __contains__(self, key):
        if "contains" in self._fail_on:
            raise RuntimeError("hostile")
        return key in self._data

    def __iter__(self):
        if "iter" in self._fail_on:
            raise RuntimeError("hostile")
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def get(self, key, default=None):
        if "get" in self._fail_on:
            raise RuntimeError("hostile")
        return self._data.get(key, default)


def validate_only_named_error(receipt):
    try:
        validate_post_share_receipt(receipt)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("hostile", [Hostile, BadStr], ids=["hostile", "badstr"])
@pytest.mark.parametrize("key", list(valid_receipt()))
def test_hostile_value_in_any_field(hostile, key):
    receipt = valid_receipt()
    receipt[key] = hostile()
    result = validate_only_named_error(receipt)
    try:
        expected_accept = in_gate(key, receipt[key])
    except Exception:  # the check itself cannot read the value: refusal expected
        expected_accept = False
    # Refused by name exactly when its gate cannot admit it (target_embed: presence only, and
    # ungated keys are never read); accepted otherwise (e.g. a BadStr kernel is still truthy).
    assert (result is None) == expected_accept, result


@pytest.mark.parametrize("hostile", [Hostile, BadStr], ids=["hostile", "badstr"])
@pytest.mark.parametrize(
    "inner", ["dtype", "shape", "finite", "positive_scalar", "device", "numel"]
)
@pytest.mark.parametrize("key", SNAPSHOT_KEYS)
def test_hostile_value_in_snapshot(hostile, inner, key):
    receipt = valid_receipt()
    receipt[key][inner] = hostile()
    validate_only_named_error(receipt)  # may pass or refuse, but only by name


@pytest.mark.parametrize("fail_on", [{"getitem"}, {"contains"}, {"get"}, {"getitem", "get"}])
def test_hostile_mapping_receipt(fail_on):
    assert validate_only_named_error(HostileMapping(valid_receipt(), fail_on)) is not None


@pytest.mark.parametrize(
    "key", ["head_weight", "head_weight_scale", "draft_embed", "target_lm_head_weight"]
)
def test_hostile_mapping_snapshot(key):
    receipt = valid_receipt()
    receipt[key] = HostileMapping(receipt[key], {"getitem", "get", "contains"})
    assert validate_only_named_error(receipt) is not None


def test_deep_nesting_is_refused_by_name():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    receipt = valid_receipt()
    receipt["head_class"] = deep  # str() recurses until RecursionError
    assert validate_only_named_error(receipt) is not None


# ---------------------------------------------------------------- properties

# "Gated": a key whose value some contract check reads. For a single-field change to a valid receipt
# (every other field as in valid_receipt()), the gate of a key is exactly the set of values that the
# contract's checks reading it accept, written below from the contract's own predicates (identity
# for `is True`/`is False`, Python `==` for `!=`, substring tests on `str(value).lower()` or
# `str(value)`, truthiness for "falsy", exact strings and integers for the consistency rows).
# "No mutation of a gated field is accepted" then means: validation passes after the change only
# when the new value is in the gate -- the only values different from the original it can accept
# are its equivalents under the check itself (1.0 or True for tp size 1, another string still
# ending with ".ParallelLMHead", another accepted method name, any truthy kernel name, another
# prefix ending in "lm_head") -- and it passes for every such value (validation is no stricter than
# the contract). Strict gates (eligible, the three alias flags, finite, positive_scalar, the exact
# dtypes, phase, role, reason) admit only the original. The consistency rows gate fields the
# overlay never read: phase, role, eligibility_reason, prefix, ordered_embeddings, quant_spec, and
# numel/data_ptr/shape/device of the snapshots they relate (each embedding must stay the other's
# tensor, the head's storage its own). Ungated keys (schema, tie_word_embeddings,
# head_method_module, draft/target embedding methods, device of the head and its scale, data_ptr
# of the scale, unknown keys) are never read: anything passes.

MISSING = object()
HEAD_PTR, SHARED_PTR = 1024, 4096
SHARED = bf16_snapshot(SHARED_PTR)  # the embedding both snapshots describe


def _get(snapshot, key):
    return snapshot.get(key) if isinstance(snapshot, Mapping) else None


def _is(value, text):
    return type(value) is str and value == text


def _snapshot_ok(s):
    # numel the product of an all-int shape; positive_scalar only for one element.
    shape, numel = _get(s, "shape"), _get(s, "numel")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return False
    if type(numel) is not int or math.prod(shape) != numel:
        return False
    return _get(s, "positive_scalar") is not True or numel == 1


def _weight_ok(s):
    return (
        isinstance(s, Mapping)
        and _is(_get(s, "dtype"), "torch.float8_e4m3fn")
        and _get(s, "finite") is True
        and _get(s, "shape") == [H, V]
        and _snapshot_ok(s)
        and type(_get(s, "data_ptr")) is int
        and _get(s, "data_ptr") != SHARED_PTR
    )


def _scale_ok(s):
    return (
        isinstance(s, Mapping)
        and bool(s)
        and bool(_get(s, "dtype"))
        and _get(s, "finite") is True
        and _get(s, "shape") == [1]
        and _get(s, "positive_scalar") is True
        and _snapshot_ok(s)
    )


def _embedding_ok(s):
    # The other embedding's snapshot is SHARED: one tensor, so the same facts.
    facts = ("shape", "numel", "device", "data_ptr")
    return (
        isinstance(s, Mapping)
        and _is(_get(s, "dtype"), "torch.bfloat16")
        and type(_get(s, "data_ptr")) is int
        and all(s.get(fact) == SHARED[fact] for fact in facts)
        and _snapshot_ok(s)
    )


def _target_head_ok(s):
    return (
        _is(_get(s, "dtype"), "torch.bfloat16")
        and _snapshot_ok(s)
        and _get(s, "data_ptr") != HEAD_PTR
    )


def _target_method_ok(v):
    text = str(v)
    return "Unquantized" in text and not any(name in text for name in ACCEPTED)


GATED = {
    "eligible": lambda v: v is True,
    "head_tp_size": lambda v: v == 1,
    "head_expected_weight_shape": lambda v: v is not None and [H, V] == v,
    "draft_config_hidden_size": lambda v: v is not None and H == v,
    "draft_config_vocab_size": lambda v: v is not None and V == v,
    "head_partition_hidden_size": lambda v: v == H,
    "head_partition_vocab_size": lambda v: v == V,
    "head_class": lambda v: str(v).endswith(".ParallelLMHead"),
    "head_method": lambda v: any(v == name for name in ACCEPTED),
    "head_kernel": lambda v: bool(v),
    "head_weight": _weight_ok,
    "head_weight_scale": _scale_ok,
    "head_weight_is_draft_embed": lambda v: v is False,
    "head_weight_is_target_embed": lambda v: v is False,
    "draft_embed_weight_is_target_embed": lambda v: v is True,
    "draft_embed": _embedding_ok,
    "target_embed": _embedding_ok,
    "target_lm_head_weight": _target_head_ok,
    "target_lm_head_method": _target_method_ok,
    "phase": lambda v: _is(v, "post_share"),
    "role": lambda v: _is(v, "draft"),
    "eligibility_reason": lambda v: _is(v, "eligible"),
    "ordered_embeddings": lambda v: v is False,
    "quant_spec": lambda v: _is(v, "fp8_per_tensor_static"),
    "prefix": lambda v: type(v) is str and v.rsplit(".", 1)[-1] == "lm_head",
}
OPTIONAL_GATED = {  # read with .get(): absence is None, which they refuse
    "draft_config_hidden_size",
    "draft_config_vocab_size",
    "head_partition_hidden_size",
    "head_partition_vocab_size",
    "phase",
    "role",
    "eligibility_reason",
    "ordered_embeddings",
    "quant_spec",
    "prefix",
}


def in_gate(key, value):
    if key not in GATED:
        return True
    if value is MISSING:
        return False if key in REQUIRED or key in OPTIONAL_GATED else True
    return GATED[key](value)


def test_gate_covers_every_checked_key():
    assert set(REQUIRED) <= set(GATED)
    assert set(GATED) - set(REQUIRED) == OPTIONAL_GATED
    receipt = valid_receipt()
    assert all(in_gate(k, receipt[k]) for k in GATED)


INTERESTING_TEXT = st.sampled_from(
    [
        "torch.bfloat16",
        "torch.float8_e4m3fn",
        "float8",
        "BFLOAT16",
        EXPECTED_METHOD,
        PACKAGE_METHOD,
        "UnquantizedEmbeddingMethod",
        "vllm.ParallelLMHead",
        ".ParallelLMHead",
        "ParallelLMHead",
        "cpu",
        "torch.float8_e5m2",
        "TORCH.FLOAT8_E4M3FN",
        "torch.bfloat16x",
        "post_share",
        "pre_share",
        "draft",
        "eligible",
        "lm_head",
        "fp8_per_tensor_static",
    ]
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([0, 1, -1, H, V, 1.0, float(H)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | INTERESTING_TEXT
)
JSON_LIKE = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=8) | st.sampled_from(["dtype", "shape", "finite", "positive_scalar"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
# Values shaped like what sits in the gated fields, so that mutations often land near the gate.
NEAR = st.one_of(
    JSON_LIKE,
    st.lists(st.sampled_from([1, H, V, 1.0, float(V), True, 0]), min_size=0, max_size=3),
    st.fixed_dictionaries(
        {},
        optional={
            "dtype": JSON_LIKE | INTERESTING_TEXT,
            "shape": st.sampled_from([[H, V], [V, H], [1], [1.0], [True], [], None, [H, float(V)]]),
            "finite": st.sampled_from([True, False, None, 1, 1.0]),
            "positive_scalar": st.sampled_from([True, False, None, 1]),
            "device": JSON_LIKE,
            "numel": st.sampled_from([H * V, 1, 0, None, 1.0, True, H]),
            "data_ptr": st.sampled_from([HEAD_PTR, SHARED_PTR, 2048, 0, None, True]),
        },
    ),
)
PROPERTY = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def outcome(receipt):
    """None when accepted; the message when refused; any other exception propagates (a failure)."""
    try:
        validate_post_share_receipt(receipt)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


@PROPERTY
@given(JSON_LIKE)
def test_arbitrary_json_never_raises_anything_else(value):
    assert outcome(value) is not None  # nothing arbitrary is a valid receipt


@settings(
    max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.fixed_dictionaries({key: NEAR for key in REQUIRED}))
def test_arbitrary_values_under_the_required_keys_never_raise_anything_else(receipt):
    outcome(receipt)


ALL_KEYS = list(valid_receipt()) + ["unknown_extra_key"]


@PROPERTY
@given(key=st.sampled_from(ALL_KEYS), value=st.one_of(NEAR, st.just(MISSING)))
def test_single_field_mutation(key, value):
    receipt = valid_receipt()
    if value is MISSING:
        receipt.pop(key, None)
    else:
        receipt[key] = value
    accepted = outcome(receipt) is None
    assert accepted == in_gate(key, value), (key, value, outcome(receipt))


@PROPERTY
@given(
    key=st.sampled_from(SNAPSHOT_KEYS),
    inner=st.sampled_from(
        ["dtype", "shape", "device", "numel", "finite", "positive_scalar", "data_ptr"]
    )
    | st.text(max_size=6),
    value=st.one_of(NEAR, st.just(MISSING)),
)
def test_single_field_mutation_inside_snapshot(key, inner, value):
    receipt = valid_receipt()
    if value is MISSING:
        receipt[key].pop(inner, None)
    else:
        receipt[key][inner] = value
    accepted = outcome(receipt) is None
    assert accepted == in_gate(key, receipt[key]), (key, inner, value, outcome(receipt))


@PROPERTY
@given(key=st.sampled_from(ALL_KEYS), value=NEAR)
def test_mutation_refusal_names_the_spec_message(key, value):
    receipt = valid_receipt()
    receipt[key] = value
    message = outcome(receipt)
    if message is not None:
        # JSON-like values never make the checks themselves fail: the refusal is a contract message.
        assert message in MESSAGES.values() or message.startswith("receipt missing ["), message


def test_nan_shapes_and_flags_are_not_equivalents():
    for key, value in [
        ("head_tp_size", math.nan),
        ("head_expected_weight_shape", [H, math.nan]),
        ("eligible", 1),
        ("head_weight_is_draft_embed", 0),
        ("draft_embed_weight_is_target_embed", 1.0),
    ]:
        receipt = valid_receipt()
        receipt[key] = value
        assert outcome(receipt) is not None, key
