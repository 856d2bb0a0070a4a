"""A receipt that contradicts itself is invalid (docs/contract.md, "Validation", the consistency
rows): every field held against the others, in v2 and v3 alike, with one answer everywhere.

The property: the receipts the real engine wrote (every version, tests/fixtures/receipts) mutated
one and two fields at a time never make validation raise anything but its named error, and none
that breaks an invariant below is VALID. The invariants are restated here from the contract, not
imported: a check missing from the package fails this test instead of agreeing with it.
"""

from __future__ import annotations

import ast
import copy
import json
import math
from pathlib import Path

import pytest
from contract_rows import CONSISTENCY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draft_head_fp8 import HeadFp8EligibilityError, validate_post_share_receipt
from draft_head_fp8.evidence.checks import check_results, messages
from draft_head_fp8.evidence.verdict import receipt_verdict

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "receipts"
V2 = "draft-head-fp8-runtime-receipt/v2"
V3 = "draft-head-fp8-runtime-receipt/v3"
VALID = {
    path.name: json.loads(path.read_text())
    for path in sorted(FIXTURES.glob("*.json"))
    if not path.stem.endswith("_fail")
}
PLAIN = VALID["cpu-tiny-post_share.json"]
PACKED = VALID["cpu-tiny-w8a16-v3-post_share.json"]
SHARD = VALID["cpu-tiny-tp2-rank1-v3-post_share.json"]

V3_OWN = {
    "weight layout known": "head weight layout is neither plain nor convert_weight_packed",
    "kernel reads the stored scale": "head kernel scale does not equal the stored per-tensor scale",
    "kernel scale is the stored scalar": (
        "head kernel scale facts contradict the stored scale it equals"
    ),
}


def test_the_valid_fixtures_are_every_version_the_engine_writes():
    assert {r["schema"] for r in VALID.values()} == {V2, V3}
    assert len(VALID) == 3  # a new engine receipt fixture belongs in the property below too


def test_the_tables_end_with_the_consistency_rows():
    v2, v3 = list(messages().items()), list(messages(V3).items())
    assert v2[-len(CONSISTENCY) :] == list(CONSISTENCY.items())
    assert v3[-len(CONSISTENCY) - len(V3_OWN) :] == [*CONSISTENCY.items(), *V3_OWN.items()]


def test_the_contract_lists_every_check_with_its_message():
    contract = (ROOT / "docs" / "contract.md").read_text()
    for label, message in {**messages(), **messages(V3)}.items():
        assert f"| `{label}` " in contract, label
        assert f"| `{message}` |" in contract, message


def test_every_consistency_row_has_a_fail_fixture_with_its_reason():
    reasons = {p.read_text().splitlines()[0] for p in FIXTURES.glob("*_fail.why")}
    for message in [*CONSISTENCY.values(), V3_OWN["kernel scale is the stored scalar"]]:
        assert message in reasons, message


# ---------------------------------------------------------------- one answer everywhere


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }


def test_the_start_up_gate_asks_receipt_verdict_and_nothing_asks_the_checks_alone():
    # The start-up gate, receipt validate, the demo and compare: schema then every check.
    package = ROOT / "src" / "draft_head_fp8"
    assert "receipt_verdict" in _calls(package / "vllm_plugin" / "post_share.py")
    alone = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "validate_post_share_receipt" in _calls(path)
    }
    assert alone == {"evidence/verdict.py"}


@pytest.mark.parametrize("schema", [[], {}, [V3], {"v": V2}, 3, None])
def test_a_schema_that_is_no_string_is_a_reason_not_a_crash(schema):
    # A list under "schema" once raised TypeError (unhashable) out of receipt validate.
    verdict = receipt_verdict({**PLAIN, "schema": schema})
    assert verdict == (
        f"schema {schema!r} is not 'draft-head-fp8-runtime-receipt/v2' or "
        "'draft-head-fp8-runtime-receipt/v3' or 'draft-head-fp8-runtime-receipt/v4'"
    )


# ---------------------------------------------------------------- the invariants, restated


def _is(value, text):
    return type(value) is str and value == text


def _int(value):
    return type(value) is int


def _snap(receipt, key):
    value = receipt.get(key)
    return value if isinstance(value, dict) else {}


def _snapshots(receipt):
    keys = ["head_weight", "head_weight_scale", "draft_embed", "target_embed"]
    keys += ["target_lm_head_weight"]
    return keys + (["head_weight_scale_stored"] if receipt.get("schema") == V3 else [])


def _numel_is_shape(snapshot):
    shape, numel = snapshot.get("shape"), snapshot.get("numel")
    return (
        isinstance(shape, list)
        and all(_int(d) and d >= 0 for d in shape)
        and _int(numel)
        and math.prod(shape) == numel
    )


def _shard_ok(r):
    size, rank, padded = r.get("tp_size"), r.get("tp_rank"), r.get("head_vocab_padded_size")
    rows = r.get("head_partition_vocab_size")
    if not all(_int(v) for v in (size, rank, padded, rows)) or size < 1:
        return False
    if not 0 <= rank < size or r.get("head_tp_size") != size or padded % size:
        return False
    return rows == padded // size and r.get("head_vocab_range") == [rank * rows, (rank + 1) * rows]


def _kernel_scale_ok(r):
    scale, stored = _snap(r, "head_weight_scale"), _snap(r, "head_weight_scale_stored")
    positive = scale.get("positive_scalar")
    return (
        r.get("head_kernel_scale_equals_stored") is True
        and stored.get("shape") == [1]
        and stored.get("positive_scalar") is True
        and stored.get("finite") is True
        and scale.get("finite") is True
        and type(positive) is bool
        and (scale.get("numel") != 1 or positive is True)
    )


def invariants(r):
    """invariant -> holds? for a JSON receipt (any values), from the contract's words."""
    draft, target = _snap(r, "draft_embed"), _snap(r, "target_embed")
    head, scale = _snap(r, "head_weight"), _snap(r, "head_weight_scale")
    prefix = r.get("prefix")
    others = ("draft_embed", "target_embed", "target_lm_head_weight")
    v3 = r.get("schema") == V3
    return {
        "a known schema": r.get("schema") in (V2, V3),
        "eligible": r.get("eligible") is True,
        "phase post_share": _is(r.get("phase"), "post_share"),
        "role draft": _is(r.get("role"), "draft"),
        "reason eligible": _is(r.get("eligibility_reason"), "eligible"),
        "policy facts": r.get("ordered_embeddings") is False
        and _is(r.get("quant_spec"), "fp8_per_tensor_static")
        and type(prefix) is str
        and prefix.rsplit(".", 1)[-1] == "lm_head",
        "alias flags": r.get("head_weight_is_draft_embed") is False
        and r.get("head_weight_is_target_embed") is False
        and r.get("draft_embed_weight_is_target_embed") is True,
        "one embedding tensor": isinstance(r.get("target_embed"), dict)
        and _int(draft.get("data_ptr"))
        and all(draft.get(f) == target.get(f) for f in ("shape", "numel", "device", "data_ptr")),
        "head storage own": _int(head.get("data_ptr"))
        and all(_snap(r, k).get("data_ptr") != head.get("data_ptr") for k in others),
        "head e4m3fn": _is(head.get("dtype"), "torch.float8_e4m3fn"),
        "embeddings and target head BF16": all(
            _is(_snap(r, k).get("dtype"), "torch.bfloat16") for k in others
        ),
        "numel = prod(shape)": all(_numel_is_shape(_snap(r, k)) for k in _snapshots(r)),
        "positive scalar one element": all(
            _snap(r, k).get("positive_scalar") is not True or _snap(r, k).get("numel") == 1
            for k in _snapshots(r)
        ),
        "weight finite": head.get("finite") is True,
        "scale one positive scalar": _kernel_scale_ok(r)
        if v3
        else scale.get("shape") == [1]
        and scale.get("positive_scalar") is True
        and scale.get("finite") is True,
        "TP facts": _shard_ok(r) if v3 else r.get("head_tp_size") == 1,
    }


def broken(receipt):
    return [name for name, holds in invariants(receipt).items() if not holds]


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_engine_receipts_keep_every_invariant(name):
    assert broken(VALID[name]) == []
    assert receipt_verdict(copy.deepcopy(VALID[name])) is None


# ---------------------------------------------------------------- the examples


def at(receipt, path, value):
    receipt = copy.deepcopy(receipt)
    *parents, last = path
    holder = receipt
    for key in parents:
        holder = holder[key]
    if value is MISSING:
        holder.pop(last, None)
    else:
        holder[last] = value
    return receipt


MISSING = object()
ALL = (PLAIN, PACKED, SHARD)
EXAMPLES = [
    (("phase",), "pre_share", "phase is post_share"),
    (("phase",), "any string", "phase is post_share"),
    (("role",), "target", "role is draft"),
    (
        ("eligibility_reason",),
        "ordered embeddings bypass LogitsProcessor.quant_method.apply",
        "reason says eligible",
    ),
    (("eligibility_reason",), "", "reason says eligible"),
    (("ordered_embeddings",), True, "decision facts eligible"),
    (("head_weight", "dtype"), "torch.float8_e5m2", "weight dtype exact"),
    (("head_weight", "dtype"), "TORCH.FLOAT8_E4M3FN", "weight dtype exact"),
    (("head_weight", "dtype"), "torch.float8_e4m3fnx", "weight dtype exact"),
    (("draft_embed", "dtype"), "torch.bfloat16x", "draft embedding dtype exact"),
    (("target_lm_head_weight", "dtype"), "torch.bfloat16x", "target head dtype exact"),
    (("target_embed", "dtype"), "torch.float8_e4m3fn", "target embedding dtype exact"),
    (("target_embed", "dtype"), "", "target embedding dtype exact"),
    (("target_embed", "dtype"), None, "target embedding dtype exact"),
    (("target_embed",), None, "draft embedding is the target's"),
    (("draft_embed", "data_ptr"), 64, "draft embedding is the target's"),
    (("head_weight", "numel"), MISSING, "numel = product of shape"),
    (("head_weight", "numel"), None, "numel = product of shape"),
    (("head_weight", "numel"), 3, "numel = product of shape"),
    (("head_weight_scale", "numel"), MISSING, "numel = product of shape"),
    (("head_weight_scale", "numel"), None, "numel = product of shape"),
    (("head_weight_scale", "numel"), 2, "numel = product of shape"),
]
V3_EXAMPLES = [
    (("head_weight_scale", "positive_scalar"), False, "kernel scale is the stored scalar"),
    (("head_weight_scale", "positive_scalar"), MISSING, "kernel scale is the stored scalar"),
    (("head_weight_scale_stored", "numel"), MISSING, "numel = product of shape"),
    (("head_weight_scale_stored", "numel"), None, "numel = product of shape"),
]
CASES = [(base, *example) for base in ALL for example in EXAMPLES]
CASES += [(base, *example) for base in (PACKED, SHARD) for example in V3_EXAMPLES]
MESSAGES = {**CONSISTENCY, **V3_OWN}


@pytest.mark.parametrize("base, path, value, label", CASES)
def test_receipt_validate_refuses_every_example_with_its_own_reason(base, path, value, label):
    receipt = at(base, path, value)
    assert broken(receipt) != []  # the oracle sees it too
    assert receipt_verdict(receipt) == MESSAGES[label]


def test_consistent_changes_stay_valid():
    # Both embeddings moved together are still one tensor; an untied target head elsewhere, and
    # a head shared with the target recorded untied, break nothing.
    for base in ALL:
        receipt = copy.deepcopy(base)
        receipt["draft_embed"]["data_ptr"] = receipt["target_embed"]["data_ptr"] = 64
        receipt["target_lm_head_weight"]["data_ptr"] = 128
        receipt["tie_word_embeddings"] = False
        assert broken(receipt) == [] and receipt_verdict(receipt) is None


# ---------------------------------------------------------------- the property

SNAPSHOT_FIELDS = ("dtype", "shape", "numel", "data_ptr", "device", "finite", "positive_scalar")


def _pool():
    """Every value the valid receipts hold, by the name of the field that holds it: what one
    field of a real receipt could plausibly be mistaken for."""
    pool: dict[str, list] = {}

    def add(name, value):
        # By JSON text, so that 1 and true, 1 and 1.0 are kept apart.
        known = [json.dumps(v) for v in pool.setdefault(name, [])]
        if json.dumps(value) not in known:
            pool[name].append(value)

    for receipt in VALID.values():
        for key, value in receipt.items():
            add(key, value)
            if isinstance(value, dict):
                for field, inner in value.items():
                    add(field, inner)
    return pool


POOL = _pool()
NEAR = {  # what the issue saw accepted, and their neighbours
    "phase": ["pre_share", "observed", "POST_SHARE", ""],
    "role": ["target", "Draft"],
    "eligibility_reason": [
        "ordered embeddings bypass LogitsProcessor.quant_method.apply",
        "role is not draft",
        "",
    ],
    "prefix": ["model.embed_tokens", "lm_head.weight", ""],
    "quant_spec": ["fp8_per_tensor_dynamic", None],
    "dtype": [
        "torch.float8_e5m2",
        "TORCH.FLOAT8_E4M3FN",
        "torch.float8_e4m3fnx",
        "torch.float8_e4m3fnuz",
        "torch.bfloat16x",
        "BFloat16",
        "torch.float16",
        "",
    ],
    "numel": [0, 1, 2, 8, 65536 * 2, True, 1.0],
    "shape": [[1], [1, 1], [1, 8], [], [2048], [64, 2048], [2048, 64], [1.0]],
    "data_ptr": [0, 1, True],
}
LEAF = st.none() | st.booleans() | st.integers(-2, 3000) | st.text(max_size=6)
GENERIC = st.recursive(
    LEAF, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)
)


def _value_for(name):
    near = POOL.get(name, []) + NEAR.get(name, [])
    options = [st.just(MISSING), st.none(), GENERIC]
    if near:
        options = [st.sampled_from(near)] * 3 + options  # mostly near the valid value
    return st.one_of(options)


def _paths(receipt):
    paths = [(key,) for key in receipt] + [("unknown_key",)]
    for key in _snapshots(receipt):
        if isinstance(receipt.get(key), dict):
            paths += [(key, field) for field in SNAPSHOT_FIELDS]
    return paths


@st.composite
def mutated(draw):
    receipt = copy.deepcopy(draw(st.sampled_from(ALL)))
    for _ in range(draw(st.integers(1, 2))):
        paths = [p for p in _paths(receipt) if len(p) == 1 or isinstance(receipt.get(p[0]), dict)]
        path = draw(st.sampled_from(paths))
        receipt = at(receipt, path, draw(_value_for(path[-1])))
    return receipt


PROPERTY = settings(
    max_examples=1000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def answers(receipt):
    """The verdict, the gate's message and the report: each may refuse, none may raise."""
    verdict = receipt_verdict(receipt)
    try:
        validate_post_share_receipt(receipt)
        gate = None
    except HeadFp8EligibilityError as exc:
        gate = str(exc)
    report = check_results(receipt)
    return verdict, gate, report


@PROPERTY
@given(mutated())
def test_no_mutation_that_breaks_an_invariant_is_valid(receipt):
    verdict, gate, report = answers(receipt)
    assert verdict is None or (type(verdict) is str and verdict), verdict
    reasons = broken(receipt)
    if reasons:
        assert verdict is not None, reasons
    if gate is not None:  # a refusal by the checks is one of their messages, and the report's
        assert gate in messages(receipt.get("schema")).values() or gate.startswith(
            "receipt missing ["
        ), gate
        assert verdict is not None
    if verdict is None:
        assert gate is None and all(row["passed"] is True for row in report)
