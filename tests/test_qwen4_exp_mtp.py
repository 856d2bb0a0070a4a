"""Qwen4-Exp's MTP layer count: vLLM's config rewrite reads ``mtp_num_hidden_layers``, and
``num_nextn_predict_layers`` only where the first is absent; the record refuses by the field vLLM
reads (its engine run: tests/test_shared_head_families.py)."""

from __future__ import annotations

import pytest

from draft_head_fp8.families import by_name


def _no_layers(field: str) -> str:
    return f"the checkpoint has no MTP layers ({field} is 0 or missing)"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"mtp_num_hidden_layers": 1}, None),
        ({"num_nextn_predict_layers": 1}, None),
        ({}, _no_layers("mtp_num_hidden_layers")),
        ({"mtp_num_hidden_layers": 0}, _no_layers("mtp_num_hidden_layers")),
        # vLLM reads the first field where the config has it, 0 or not.
        ({"mtp_num_hidden_layers": 0, "num_nextn_predict_layers": 1},
         _no_layers("mtp_num_hidden_layers")),
        ({"num_nextn_predict_layers": 0}, _no_layers("num_nextn_predict_layers")),
        # A multimodal checkpoint's count is its text config's.
        ({"text_config": {"mtp_num_hidden_layers": 1}}, None),
        ({"text_config": {"num_nextn_predict_layers": 0}}, _no_layers("num_nextn_predict_layers")),
    ],
)  # fmt: skip
def test_the_mtp_layer_count_is_read_where_vllm_reads_it(config, reason):
    assert by_name("qwen4-exp-mtp").refusal(config) == reason
