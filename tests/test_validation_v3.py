"""Receipt v3 (docs/contract.md, "Receipt v3"): the v2 checks in order with their messages, six of
them read through the weight layout and the tensor-parallel facts (and the snapshot rows over the
stored scale too), then v3's own; every check triggered alone from receipts the real engine wrote
(TP 1 packed, TP 2 rank 1), the first failing check wins, a change inside a snapshot is accepted
only where it keeps every fact, and nothing but ``HeadFp8EligibilityError`` escapes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from contract_rows import CONSISTENCY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draft_head_fp8 import HeadFp8EligibilityError, schemas, validate_post_share_receipt
from draft_head_fp8.evidence.checks import messages

FIXTURES = Path(__file__).parent / "fixtures" / "receipts"
PACKED = json.loads((FIXTURES / "cpu-tiny-w8a16-v3-post_share.json").read_text())
SHARD = json.loads((FIXTURES / "cpu-tiny-tp2-rank1-v3-post_share.json").read_text())
V3 = "draft-head-fp8-runtime-receipt/v3"

# The contract, restated: labels and messages in order.
MESSAGES = {
    "eligible": "receipt is not eligible",
    "tensor parallel shard": "head TP rank, size and vocab range do not match its partition",
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
    "weight layout known": "head weight layout is neither plain nor convert_weight_packed",
    "kernel reads the stored scale": "head kernel scale does not equal the stored per-tensor scale",
    "kernel scale is the stored scalar": (
        "head kernel scale facts contradict the stored scale it equals"
    ),
}
ORDER = list(MESSAGES)


def put(key, value):
    return lambda r: r.__setitem__(key, value)


def inner(key, field, value):
    return lambda r: r[key].__setitem__(field, value)


def drop(key):
    return lambda r: r.pop(key)


# label -> mutations of the TP 1 packed receipt that fail that check and none before it
ALONE = {
    "eligible": [put("eligible", False)],
    "tensor parallel shard": [
        put("tp_size", 2),
        put("tp_rank", 1),
        put("tp_rank", -1),
        put("head_tp_size", 2),
        put("head_vocab_range", [0, 1024]),
        put("head_vocab_range", None),
        put("head_vocab_padded_size", 2049),
        put("tp_size", "1"),
    ],
    "head dimensions known": [put("head_expected_weight_shape", None)],
    "draft config dimensions": [put("draft_config_hidden_size", None)],
    "hidden partition = config": [put("head_partition_hidden_size", 32)],
    "vocab partition = config": [
        put("head_real_vocab_range", [0, 2047]),
        put("head_real_vocab_range", None),
        put("draft_config_vocab_size", 4096),
    ],
    "head class": [put("head_class", "x.VocabParallelEmbedding")],
    "head method": [put("head_method", "UnquantizedEmbeddingMethod")],
    "kernel recorded": [put("head_kernel", None)],
    "weight/scale metadata": [
        put("head_weight_scale_stored", None),
        inner("head_weight_scale_stored", "dtype", None),
        put("head_weight", None),
    ],
    "weight/scale finite": [
        inner("head_weight_scale_stored", "finite", False),
        inner("head_weight_scale", "finite", None),
        inner("head_weight", "finite", False),
    ],
    "scale is one positive scalar": [
        inner("head_weight_scale_stored", "positive_scalar", False),
        inner("head_weight_scale_stored", "shape", [1, 1]),
    ],
    "weight shape [hidden, vocab]": [
        put("head_weight_logical_shape", [2048, 64]),
        inner("head_weight", "shape", [64, 2048]),  # a packed weight is stored [vocab, hidden]
        put("head_weight_logical_shape", None),
        put("head_expected_weight_shape", [64, 1024]),
    ],
    "weight is FP8": [inner("head_weight", "dtype", "torch.bfloat16")],
    "head not the draft embedding": [put("head_weight_is_draft_embed", True)],
    "head not the target embedding": [put("head_weight_is_target_embed", True)],
    "draft embedding shared": [put("draft_embed_weight_is_target_embed", False)],
    "draft embedding BF16": [inner("draft_embed", "dtype", "torch.float16")],
    "target head not FP8": [put("target_lm_head_method", "DraftHeadFp8LinearMethod")],
    "target head BF16": [inner("target_lm_head_weight", "dtype", "torch.float32")],
    "target head unquantized": [put("target_lm_head_method", "Fp8LinearMethod")],
    "phase is post_share": [put("phase", "pre_share"), put("phase", "observed")],
    "role is draft": [put("role", "target")],
    "reason says eligible": [
        put("eligibility_reason", "ordered embeddings bypass LogitsProcessor.quant_method.apply"),
        put("eligibility_reason", ""),
    ],
    "decision facts eligible": [
        put("ordered_embeddings", True),
        put("quant_spec", None),
        put("prefix", "model.embed_tokens"),
    ],
    "draft embedding is the target's": [
        put("target_embed", None),
        inner("draft_embed", "data_ptr", 1),
        inner("target_embed", "shape", [1024, 128]),  # a rank's shard of it, not it
    ],
    "head storage its own": [inner("head_weight", "data_ptr", PACKED["draft_embed"]["data_ptr"])],
    "weight dtype exact": [
        inner("head_weight", "dtype", "torch.float8_e5m2"),
        inner("head_weight", "dtype", "TORCH.FLOAT8_E4M3FN"),
        inner("head_weight", "dtype", "torch.float8_e4m3fnx"),
    ],
    "draft embedding dtype exact": [inner("draft_embed", "dtype", "torch.bfloat16x")],
    "target embedding dtype exact": [
        inner("target_embed", "dtype", "torch.float8_e4m3fn"),
        inner("target_embed", "dtype", ""),
        inner("target_embed", "dtype", None),
    ],
    "target head dtype exact": [inner("target_lm_head_weight", "dtype", "torch.bfloat16x")],
    "numel = product of shape": [
        inner("head_weight", "numel", None),
        lambda r: r["head_weight"].pop("numel"),
        inner("head_weight_scale", "numel", None),
        inner("head_weight_scale_stored", "numel", 2),  # the snapshot v2 does not have
        lambda r: r["head_weight_scale_stored"].pop("numel"),
    ],
    "positive scalar is one element": [inner("head_weight", "positive_scalar", True)],
    "weight layout known": [put("head_weight_layout", "marlin"), put("head_weight_layout", None)],
    "kernel reads the stored scale": [
        put("head_kernel_scale_equals_stored", False),
        put("head_kernel_scale_equals_stored", None),
        inner("head_weight_scale", "shape", [1]),  # a packed kernel reads [1, k-blocks]
    ],
    "kernel scale is the stored scalar": [
        inner("head_weight_scale", "positive_scalar", False),  # one element, equal to the stored
        inner("head_weight_scale", "positive_scalar", None),
        lambda r: r["head_weight_scale"].pop("positive_scalar"),
    ],
}
CASES = [(label, i, m) for label, ms in ALONE.items() for i, m in enumerate(ms)]


def message_of(receipt):
    try:
        validate_post_share_receipt(receipt)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


def test_receipts_the_engine_wrote_are_valid_and_match_the_schema():
    for receipt in (PACKED, SHARD):
        assert receipt["schema"] == V3 and len(receipt) == 39
        assert schemas.errors("runtime-receipt-v3", receipt) == []
        assert message_of(copy.deepcopy(receipt)) is None
    assert PACKED["head_weight_layout"] == "convert_weight_packed" and PACKED["tp_size"] == 1
    assert SHARD["tp_rank"] == 1 and SHARD["head_vocab_range"] == [1024, 2048]


def test_the_package_table_is_the_contract():
    assert messages(V3) == MESSAGES
    # v3 keeps v2's checks, in v2's order and words, but for the one that v2 gets wrong at TP N.
    v2 = messages()
    assert [m for label, m in MESSAGES.items() if label in v2] == [
        m for label, m in v2.items() if label != "tensor parallel 1"
    ]


def test_every_check_has_a_case():
    assert list(ALONE) == ORDER


@pytest.mark.parametrize("label, index, mutate", CASES, ids=[f"{c}-{i}" for c, i, _ in CASES])
def test_each_check_alone(label, index, mutate):
    receipt = copy.deepcopy(PACKED)
    mutate(receipt)
    assert message_of(receipt) == MESSAGES[label]


@pytest.mark.parametrize("label", ORDER)
def test_first_failing_check_wins(label):
    receipt = copy.deepcopy(PACKED)
    for later in reversed(ORDER[ORDER.index(label) :]):
        ALONE[later][0](receipt)
    assert message_of(receipt) == MESSAGES[label]


def test_a_shard_is_judged_by_its_own_rows():
    shard = copy.deepcopy(SHARD)
    assert message_of(shard) is None
    shard["head_real_vocab_range"] = [1024, 2047]  # one token short of the config's vocabulary
    assert message_of(shard) == MESSAGES["vocab partition = config"]


@pytest.mark.parametrize("key", ["head_weight_layout", "tp_rank", "head_vocab_range"])
def test_missing_v3_keys_are_named(key):
    receipt = copy.deepcopy(PACKED)
    del receipt[key]
    assert message_of(receipt) == f"receipt missing [{key!r}]"


LEAVES = st.none() | st.booleans() | st.integers(-3, 5000) | st.text(max_size=8)
VALUES = st.recursive(
    LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3)
)
PROPERTY = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY
@given(key=st.sampled_from(sorted(PACKED)), value=VALUES)
def test_any_single_change_is_refused_only_by_name(key, value):
    receipt = copy.deepcopy(PACKED)
    receipt[key] = value
    message = message_of(receipt)  # anything else escaping fails the test
    if message is not None:
        assert message in MESSAGES.values() or message.startswith("receipt missing ["), message


def _keeps_every_fact(key, field, value):
    """Whether setting ``SHARD[key][field]`` to ``value`` leaves a receipt that proves the same
    head: only the unchanged value, but where the contract reads less than the value itself."""
    if field == "dtype" and key != "head_weight":
        return bool(value)  # a scale's dtype must be recorded; which one, no check says
    if field == "positive_scalar" and key == "head_weight":
        return value is not True  # not recorded for a weight; True would claim one element
    original = SHARD[key].get(field)
    return json.dumps(value, sort_keys=True) == json.dumps(original, sort_keys=True)


@PROPERTY
@given(
    key=st.sampled_from(["head_weight", "head_weight_scale", "head_weight_scale_stored"]),
    field=st.sampled_from(["dtype", "shape", "finite", "positive_scalar", "numel"]),
    value=VALUES | st.sampled_from([True, False, 1, [1], [1, 1], [1024, 64], 65536]),
)
def test_any_change_inside_a_snapshot_is_refused_by_name_unless_it_keeps_every_fact(
    key, field, value
):
    # (It once only called the validator: it passed even when a change was accepted, issue 17.)
    receipt = copy.deepcopy(SHARD)
    receipt[key][field] = value
    message = message_of(receipt)
    assert (message is None) == _keeps_every_fact(key, field, value), (key, field, value, message)
    assert message is None or message in MESSAGES.values(), message


def test_the_snapshot_property_can_fail():
    # What it would have let through before the consistency rows, each refused now.
    for key, field, value in [
        ("head_weight", "dtype", "torch.float8_e5m2"),
        ("head_weight", "numel", None),
        ("head_weight_scale", "positive_scalar", False),
        ("head_weight_scale_stored", "numel", 2),
    ]:
        assert not _keeps_every_fact(key, field, value)
        receipt = copy.deepcopy(SHARD)
        receipt[key][field] = value
        assert message_of(receipt) is not None, (key, field, value)


def wide_packed_head():
    """PACKED at hidden 1024, as a real packed head wider than one K block is recorded: the kernel
    reads a [1, 8] block scale, every entry the stored scale, so not one positive scalar."""
    receipt = copy.deepcopy(PACKED)
    receipt["draft_config_hidden_size"] = receipt["head_partition_hidden_size"] = 1024
    receipt["head_expected_weight_shape"] = receipt["head_weight_logical_shape"] = [1024, 2048]
    receipt["head_weight"].update(shape=[2048, 1024], numel=2048 * 1024)
    receipt["head_weight_scale"].update(shape=[1, 8], numel=8, positive_scalar=False)
    return receipt


def test_a_packed_head_wider_than_one_k_block_stays_valid():
    receipt = wide_packed_head()
    assert schemas.errors("runtime-receipt-v3", receipt) == []
    assert message_of(receipt) is None
    receipt["head_weight_scale"]["positive_scalar"] = True  # eight elements are not one
    assert message_of(receipt) == MESSAGES["positive scalar is one element"]
    receipt["head_weight_scale"]["positive_scalar"] = None  # unread: nothing proves the entries
    assert message_of(receipt) == MESSAGES["kernel scale is the stored scalar"]


@PROPERTY
@given(st.dictionaries(st.sampled_from(sorted(PACKED)), VALUES, max_size=40))
def test_arbitrary_v3_documents_never_raise_anything_else(document):
    assert message_of({**document, "schema": V3}) is not None
