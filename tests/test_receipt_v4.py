"""Receipt v4, a later proof (evidence/receipt_update.py, evidence/checks_update.py): a v3 receipt
of the head as it serves after a weight update plus what only a later proof says; valid exactly when
every v3 check holds (phase ``post_update``) and the proof is numbered, its rows are the ones its
source names, the plugin wrote nothing of the target, and the FP8 head serves. Each check can
fail; the schema rejects what it does not know."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draft_head_fp8 import schemas
from draft_head_fp8.evidence.checks_update import (
    V4_CHECKS,
    update_check_results,
    validate_post_update_receipt,
)
from draft_head_fp8.evidence.receipt_update import (
    RECEIPT_V4,
    checkpoint_source,
    extend_to_v4,
    summary,
    update_facts,
    update_source,
)
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.policy import HeadFp8EligibilityError

FIXTURES = Path(__file__).parent / "fixtures" / "receipts"
ROWS = "ab" * 32
HEAD, EMBED = "cd" * 32, "ef" * 32


def v4(**changes) -> dict:
    v3 = json.loads((FIXTURES / "cpu-tiny-w8a16-v3-post_share.json").read_text())
    receipt = extend_to_v4(
        v3,
        proof=2,
        weight_update=update_facts(
            number=3, kind="weight_transfer", model="target", announced=True, detail="session"
        ),
        head_source=update_source(3, ROWS),
        head_rows_sha256=ROWS,
        target_before=(HEAD, EMBED),
        target_after=(HEAD, EMBED),
        serving="fp8",
        serving_reason=None,
        target_lm_head_serves_its_weight=True,
    )
    receipt.update(changes)
    return receipt


def test_a_later_proof_of_a_valid_head_is_valid():
    receipt = v4()
    assert receipt["schema"] == RECEIPT_V4 and receipt["phase"] == "post_update"
    assert receipt_verdict(receipt) is None
    validate_post_update_receipt(receipt)
    assert all(r["passed"] for r in update_check_results(receipt))
    assert summary(receipt) == {
        "proof": 2, "update": "weight_transfer", "model": "target", "announced": True,
        "source": "weight_update", "serving": "fp8", "serving_reason": None,
    }  # fmt: skip


def test_a_checkpoint_vouches_with_its_own_hash():
    source = checkpoint_source(
        {"tensor": "lm_head.weight", "rows": [0, 1024], "sha256": ROWS, "file": "m.safetensors"},
        "/models/new",
    )
    assert receipt_verdict(v4(head_source=source)) is None
    assert receipt_verdict(v4(head_source={**source, "sha256": HEAD})) == (
        "head source does not vouch for the rows the FP8 copy was made from"
    )


MUTATIONS = {
    "phase is post_update": {"phase": "post_share"},
    "proof and update numbered": {"proof": 0},
    "bytes are the rows named": {"head_rows_sha256": HEAD},
    "target written only by the update": {"target_written_by_plugin": True},
    "the FP8 head serves": {"serving": "bf16_rows", "serving_reason": "head weight holds NaN"},
}


@pytest.mark.parametrize("label", sorted(MUTATIONS))
def test_each_later_proof_check_fails_on_its_own_fault(label):
    receipt = v4(**MUTATIONS[label])
    message = next(c.message for c in V4_CHECKS if c.label == label)
    failed = [r["check"] for r in update_check_results(receipt) if r["passed"] is False]
    assert label in failed
    with pytest.raises(HeadFp8EligibilityError):
        validate_post_update_receipt(receipt)
    if label != "proof and update numbered":  # the schema's minimum speaks first for proof 0
        verdict = receipt_verdict(receipt)
        assert verdict == message or message in [
            r["message"] for r in update_check_results(receipt)
        ]


def test_the_v3_checks_still_judge_the_head_itself():
    receipt = v4()
    receipt["head_weight"] = {**receipt["head_weight"], "dtype": "torch.bfloat16"}
    assert receipt_verdict(receipt) is not None
    labels = {c.label for c in V4_CHECKS}
    assert "phase is post_share" not in labels and "weight dtype exact" in labels


def test_the_schema_rejects_an_unknown_key_and_a_missing_one():
    assert schemas.errors("runtime-receipt-v4", v4(extra=1))
    receipt = v4()
    del receipt["target_written_by_plugin"]
    assert schemas.errors("runtime-receipt-v4", receipt)
    assert "receipt missing" in str(pytest.raises(
        HeadFp8EligibilityError, validate_post_update_receipt, receipt
    ).value)  # fmt: skip


@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()), st.dictionaries(
    st.sampled_from(["proof", "serving", "head_source", "weight_update"]), st.integers()
)))  # fmt: skip
def test_whatever_it_is_given_validation_raises_only_its_own_error(value):
    receipt = copy.deepcopy(v4())
    receipt["head_source"] = value
    try:
        validate_post_update_receipt(receipt)
    except HeadFp8EligibilityError:
        pass
    assert isinstance(receipt_verdict(value), str)
