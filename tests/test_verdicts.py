"""The pure verdicts (draft_head_fp8.verdicts): one judgment per kind of class, from facts alone,
with the reasons docs/contract.md ("Drafters no family serves") states; an architecture whose
facts fit no judgment is "not judged yet". The facts here are made by hand, as
vllm_plugin/head_facts.py reads them from vLLM's source; test_registry_verdicts.py judges the
installed vLLM's own registry."""

from __future__ import annotations

import dataclasses

import pytest

from draft_head_fp8.families import all_families, by_name
from draft_head_fp8.policy import unexpected_drafter_class
from draft_head_fp8.verdict_kinds import KINDS, NOT_JUDGED, REFUSED, SERVED
from draft_head_fp8.verdicts import (
    ClassFacts,
    counts,
    family_alike,
    head_reading,
    judge,
)

MTP_LAYERS = "model.layers[].shared_head.head"
# The served families' classes as their facts read (what vLLM's source says of each).
MTP_SHARED = ClassFacts("X", "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP",
                        logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,))  # fmt: skip
# Bailing's compute_logits reads the lm_head vLLM's share installs, else the MTP layer's head.
BAILING_MTP = dataclasses.replace(MTP_SHARED, logits_heads=("lm_head", MTP_LAYERS))
MTP_LM_HEAD = ClassFacts("X", "vllm.model_executor.models.qwen3_next_mtp:Qwen3NextMTP",
                         logits_heads=("lm_head",), heads=("lm_head",))  # fmt: skip
EAGLE1 = ClassFacts("X", "vllm.model_executor.models.llama_eagle:EagleLlamaForCausalLM",
                    logits_heads=("lm_head",), heads=("lm_head",),
                    has_own_lm_head="per checkpoint", top_tokens="head")  # fmt: skip
EAGLE3 = dataclasses.replace(
    EAGLE1, vllm_class="vllm.model_executor.models.llama_eagle3:Eagle3LlamaForCausalLM", d2t=True
)
OWN_TIED = ClassFacts("X", "vllm.model_executor.models.gemma4_mtp:Gemma4MTP",
                      logits_heads=("lm_head",), heads=("lm_head",), has_own_lm_head="True",
                      logits_changes=("masks: logits.index_fill_",),
                      top_tokens="its own")  # fmt: skip
DFLASH = dataclasses.replace(
    EAGLE3, lineage=("DFlashQwen3ForCausalLM", "Qwen3ForCausalLM"), top_tokens=None
)
DSPARK = dataclasses.replace(
    DFLASH,
    heads=("lm_head", "model.markov_head.markov_w2"),
    lineage=("Qwen3DSparkForCausalLM", *DFLASH.lineage),
)
BY_CLASS = {
    "DeepSeekMTP": MTP_SHARED,
    "Glm4MoeMTP": MTP_SHARED,
    "Qwen3NextMTP": MTP_LM_HEAD,
    "Qwen3_5MoeMTP": MTP_LM_HEAD,
    "MiMoMTP": MTP_LM_HEAD,
    "ErnieMTP": MTP_LM_HEAD,
    "Qwen3_5MTP": MTP_LM_HEAD,
    "Glm4MoeLiteMTP": MTP_SHARED,
    "GlmOcrMTP": MTP_SHARED,
    "NemotronHMTP": dataclasses.replace(MTP_LM_HEAD, has_own_lm_head="False"),
    # Served with the mask after its head made part of the pick (Family.drafted_vocab).
    "Nemotron3_5TranscribeMTP": dataclasses.replace(
        MTP_LM_HEAD,
        has_own_lm_head="False",
        logits_changes=(
            "masks: logits[..., self.config.speechlm_output_vocab_size:] = -torch.inf",
        ),
    ),
    "ExaoneMoeMTP": MTP_LM_HEAD,
    "Exaone4_5_MTP": MTP_LM_HEAD,
    "HYV3MTP": MTP_SHARED,
    "HYV4MTP": MTP_SHARED,
    "BailingMoeV25MTPModel": BAILING_MTP,
    "BailingMoeV3MTPModel": BAILING_MTP,
    "MiMoV2MTP": MTP_LM_HEAD,
    "MiMoV2OmniMTP": MTP_LM_HEAD,
    "Qwen4ExpMTP": MTP_LM_HEAD,
    "InternS2MobiusMTP": MTP_LM_HEAD,
    "Step3p5MTP": dataclasses.replace(MTP_SHARED, has_own_lm_head="True"),
    # An MTP step whose class says it has no head of its own (the target's, at the share).
    "ParseAuxMTPModel": dataclasses.replace(MTP_LM_HEAD, has_own_lm_head="False"),
    "EagleLlamaForCausalLM": EAGLE1,
    "EagleMistralForCausalLM": dataclasses.replace(EAGLE1, has_own_lm_head="False"),
    "EagleLlama4ForCausalLM": EAGLE1,
    "EagleMiniCPMForCausalLM": dataclasses.replace(EAGLE1, top_tokens=None),
    "EagleDeepseekV3ForCausalLM": dataclasses.replace(EAGLE1, top_tokens=None),
    "EagleMistralLarge3ForCausalLM": dataclasses.replace(
        EAGLE1, has_own_lm_head="False", top_tokens=None
    ),
    "Eagle3LlamaForCausalLM": EAGLE3,
    "Eagle3Qwen3ForCausalLM": EAGLE3,
    "Eagle3DeepseekV2ForCausalLM": EAGLE3,
    "Gemma4MTP": OWN_TIED,
    # A block per step, its head read as EAGLE-3's (its own or the target's, d2t).
    "DFlashQwen3ForCausalLM": DFLASH,
    # DFlash's, and the Markov term's own head beside it (markov_pick).
    "Qwen3DSparkForCausalLM": DSPARK,
    # Qwen3 DSpark's, its load_weights replaced by one that never says has_own_lm_head.
    "Gemma4DSparkForCausalLM": dataclasses.replace(
        DSPARK,
        has_own_lm_head="False",
        lineage=("Gemma4DSparkForCausalLM", *DSPARK.lineage),
    ),
    # DFlash's, with the selector reading the head's top-K; the NoPE subclass below it.
    "DFlash2Qwen3ForCausalLM": dataclasses.replace(
        DFLASH, lineage=("DFlash2Qwen3ForCausalLM", *DFLASH.lineage)
    ),
    "RicursiveDFlash2ForCausalLM": dataclasses.replace(
        DFLASH,
        lineage=("RicursiveDFlash2ForCausalLM", "DFlash2Qwen3ForCausalLM", *DFLASH.lineage),
    ),
}


def served() -> dict:
    facts = {}
    for family in all_families():
        for architecture, where in family.drafters.items():
            theirs = BY_CLASS[where.rpartition(":")[2]]
            facts[architecture] = (
                family,
                dataclasses.replace(theirs, architecture=architecture, vllm_class=where),
            )
    return facts


def verdict(**fields):
    facts = ClassFacts(**{"architecture": "NewDrafterModel", "vllm_class": "vllm.m:C", **fields})
    return judge(facts, all_families(), served())


# What vLLM 0.34's DSpark speculator does with Muse Spark's transform (as term_facts reads it).
TRANSFORM = (
    "apply_output_logit_transform (its method C.apply_output_logit_transform; applied to the "
    "head's logits plus the term before the pick, in DSparkSpeculator._sample_markov_chain)"
)
# One class per kind, as its facts read, and the start of the reason the kind gives.
KIND_CASES = {
    "raises here": dict(raises="NotImplementedError: not on CPU", compute_logits=False),
    "no head": dict(compute_logits=False),
    "markov term": dict(logits_heads=("lm_head",), heads=("lm_head", "model.markov_head.w2")),
    "several heads": dict(logits_heads=("lm_head",), heads=("lm_head", "lm_heads[]")),
    "own heads per layer": dict(logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,),
                                has_own_lm_head="True"),
    "logits changed": dict(logits_heads=("lm_head",), logits_changes=("own GEMM: torch.addmm",)),
    "own top tokens": dict(logits_heads=("lm_head",), top_tokens="masked.get_top_tokens"),
    "embedding head": dict(logits_heads=("model.embed_tokens",),
                           has_own_lm_head="per checkpoint"),
    "block drafting": dict(logits_heads=("lm_head",), lineage=("DFlashQwen3ForCausalLM",),
                           has_own_lm_head="per checkpoint", d2t=True),
    # Both draft a block too: what they do after the head comes first.
    "log-probability candidates": dict(logits_heads=("lm_head",),
                                       lineage=("DFlashQwen3ForCausalLM",),
                                       candidate_log_probs="C.compute_candidates: top-k log-probs"),
    "vocabulary term": dict(logits_heads=("lm_head",), lineage=("DFlashQwen3ForCausalLM",),
                            vocab_terms=("RefinerHead.w2",)),
    "parallel drafting": dict(architecture="PeagleNewForCausalLM", logits_heads=("lm_head",),
                              has_own_lm_head="per checkpoint", d2t=True),
    "same class": dict(vllm_class="vllm.model_executor.models.deepseek_mtp:DeepSeekMTP",
                       logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,)),
    "reads like a family": dict(logits_heads=("lm_head", MTP_LAYERS), heads=(MTP_LAYERS,)),
    "cannot import here": dict(logits_heads=("lm_head",), heads=("lm_head",),
                               import_error="ImportError: needs the CUDA flash attention"),
    "cannot build here": dict(logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,),
                              build_error="its attention drops a weight it reads"),
    "fails in vLLM": dict(logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,),
                          attribute_error="its forward reads what a layer lacks"),
    "cannot draft here": dict(logits_heads=("lm_head",), lineage=("DFlashQwen3ForCausalLM",),
                              has_own_lm_head="False",
                              draft_error="its hook reads a dropped weight"),
    "cannot run here": dict(logits_heads=("lm_head",), heads=("lm_head", "model.markov_head.w2"),
                            kernel_error="its model file calls a kernel absent here"),
    "own draft steps": dict(logits_heads=("lm_head",), heads=("lm_head", "model.markov_head.w2"),
                            speculator_hooks=(TRANSFORM,)),
    "not judged": dict(logits_heads=("model.mtp[].head",), heads=("model.mtp[].head",)),
}  # fmt: skip


def test_every_kind_has_a_case():
    assert set(KIND_CASES) | {"served", "class moved"} == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_each_kind_is_judged_from_the_facts(kind):
    v = verdict(**KIND_CASES[kind])
    assert v.kind == kind
    assert v.status == KINDS[kind][0]
    fixed = KINDS[kind][1].split("{")[0]
    assert v.reason.startswith(fixed), v.reason
    assert "{" not in v.reason and "}" not in v.reason


def test_the_reasons_by_kind_exactly():
    assert verdict(**KIND_CASES["markov term"]).reason == (
        "adds a low-rank Markov term (model.markov_head.w2) to the head's logits: the FP8 head's "
        "exact pick is not the draft's argmax; serving it needs the exact pick made after that "
        "term, as qwen3-dspark's is for its class: a family record of its own, a tiny checkpoint "
        "and an engine test"
    )
    assert verdict(**KIND_CASES["several heads"]).reason == (
        "drafts through several heads (lm_heads[]): the plugin proves the head each draft step "
        "reads (the drafter's one head, or one per draft layer: step3p5-mtp (Step3p5MTP)), not "
        "several heads read together; serving it needs every head quantized, rescored and proven"
    )
    assert verdict(**KIND_CASES["own heads per layer"]).reason == (
        "keeps a head of its own in each draft layer (model.layers[].shared_head.head; "
        "has_own_lm_head True): several heads per drafter are served for step3p5-mtp "
        "(Step3p5MTP) only (each layer's head FP8 from its own checkpoint tensor, each pick "
        "certified against that head's BF16 rows, each head proven in the receipt), not for this "
        "class: needs a family record, a tiny checkpoint and an engine test"
    )
    assert verdict(**KIND_CASES["reads like a family"]).reason == (
        "reads its head like bailing-v25-mtp (the target's, shared (an MTP share): lm_head, "
        "model.layers[].shared_head.head), the share the plugin already proves: not yet served: "
        "needs a family record, a tiny checkpoint and an engine test"
    )
    assert verdict(**KIND_CASES["block drafting"]).reason == (
        "drafts a block of tokens in one pass (DFlash: DFlashQwen3ForCausalLM) with a class no "
        "family serves: vLLM's block drafting is served for gemma4-dspark "
        "(Gemma4DSparkForCausalLM), qwen3-dflash (DFlashQwen3ForCausalLM), qwen3-dflash2 "
        "(DFlash2Qwen3ForCausalLM), qwen3-dspark (Qwen3DSparkForCausalLM) only, each proven on "
        "the engine (every position of the block through the FP8 head and the exact pick), not "
        "for this class; its head: its own if its checkpoint has one, else the target's "
        "(has_own_lm_head per checkpoint): lm_head; d2t; needs a family record, a tiny "
        "checkpoint and an engine test"
    )
    assert verdict(**KIND_CASES["vocabulary term"]).reason == (
        "builds a projection of its own onto the vocabulary (RefinerHead.w2) whose output its "
        "drafter adds to the head's logits before it picks, pass after pass: the FP8 head's "
        "exact pick is not the draft's; serving it needs the pick after that term proven where "
        "vLLM adds it, as qwen3-dspark's is after its Markov term"
    )
    assert verdict(**KIND_CASES["raises here"]).reason == (
        "vLLM's class refuses this platform when built (NotImplementedError: not on CPU): nothing "
        "can be built or proven here; judge it where vLLM builds it"
    )


def test_a_class_vllm_cannot_build_here_says_why_and_how_it_reads_its_head():
    v = verdict(**KIND_CASES["cannot build here"])
    assert (v.status, v.kind, v.family) == (REFUSED, "cannot build here", "deepseek-v3-mtp")
    assert v.reason == (
        "vLLM cannot build it on this platform (its attention drops a weight it reads): nothing "
        "can be built or proven here; read from its source, it reads its head like "
        "deepseek-v3-mtp (the target's, shared (an MTP share): model.layers[].shared_head.head), "
        "the share the plugin already proves: not yet served: needs a family record, a tiny "
        "checkpoint and an engine test"
    )
    # A Markov term is a candidate for serving too (as Qwen3's DSpark is): what keeps vLLM from
    # building it here comes first; a judgment that is not a candidate keeps its own reason.
    markov = verdict(**KIND_CASES["markov term"], build_error="x")
    assert markov.kind == "cannot build here" and "adds a low-rank Markov term" in markov.reason
    assert verdict(**KIND_CASES["embedding head"], build_error="x").kind == "embedding head"


def test_a_class_vllm_drafts_only_from_remote_code_keeps_its_kind_and_says_so_after_it():
    """A class vLLM drafts with only from a checkpoint's own config code (config_facts) is no
    refusal of its own: a tiny checkpoint shipping that code, run with trust_remote_code,
    engine-tests it here (interns2-mobius-mtp's does). Its kind is the other facts'; the fact
    ends the reason."""
    remote = dict(
        logits_heads=("lm_head",), heads=("lm_head",), config_error="a type no class reads"
    )
    v = verdict(**remote)
    assert (v.status, v.kind, v.family) == (REFUSED, "reads like a family", "ernie45-mtp")
    assert v.reason == (
        "reads its head like ernie45-mtp (the target's, shared (an MTP share): lm_head), the "
        "share the plugin already proves: not yet served: needs a family record, a tiny "
        "checkpoint and an engine test; vLLM drafts with it only from a checkpoint's own config "
        "code (a type no class reads)"
    )
    built = verdict(**remote, build_error="x")
    assert built.kind == "cannot build here" and built.reason.endswith("(a type no class reads)")
    # A served class says nothing of it; a refusal that is not a candidate keeps its reason too.
    assert verdict(**KIND_CASES["embedding head"], config_error="x").kind == "embedding head"
    mobius = dict(MTP_LM_HEAD.__dict__, architecture="InternS2MobiusMTP", config_error="x")
    mobius["vllm_class"] = "vllm.model_executor.models.interns2_mobius:InternS2MobiusMTP"
    served_here = judge(ClassFacts(**mobius), all_families(), served())
    assert (served_here.kind, served_here.family) == ("served", "interns2-mobius-mtp")
    assert "config code" not in served_here.reason


def test_a_class_whose_forward_reads_what_its_module_lacks_fails_in_vllm_on_any_platform():
    """OpenPangu's MTP class (attribute_facts): what fails on every platform comes before what
    fails on this one; a config only remote code reads is said after it."""
    v = verdict(**KIND_CASES["fails in vLLM"])
    assert (v.status, v.kind, v.family) == (REFUSED, "fails in vLLM", "deepseek-v3-mtp")
    assert v.reason == (
        "vLLM's own code fails when it drafts with it, on any platform (its forward reads what a "
        "layer lacks): nothing can be proven with it; read from its source, it reads its head "
        "like deepseek-v3-mtp (the target's, shared (an MTP share): model.layers[].shared_head."
        "head), the share the plugin already proves: not yet served: needs a family record, a "
        "tiny checkpoint and an engine test"
    )
    for later in ("build_error", "kernel_error", "draft_error"):
        assert verdict(**KIND_CASES["fails in vLLM"], **{later: "x"}).kind == "fails in vLLM"
    with_remote = verdict(**KIND_CASES["fails in vLLM"], config_error="x")
    assert with_remote.kind == "fails in vLLM" and with_remote.reason.endswith("config code (x)")
    assert verdict(**KIND_CASES["no head"], attribute_error="x").kind == "no head"


def test_a_block_drafter_that_builds_here_but_cannot_draft_says_so_before_the_engine_test():
    """Laguna's DFlash class on vLLM 0.34 here: it builds and loads, and its first draft step
    fails (build_facts.draft_error). What would serve it elsewhere (block drafting) follows."""
    v = verdict(**KIND_CASES["cannot draft here"])
    assert (v.status, v.kind) == (REFUSED, "cannot draft here")
    assert v.reason == (
        "vLLM builds and loads it on this platform but cannot draft with it (its hook reads a "
        "dropped weight): nothing can be proven here; read from its source, it drafts a block "
        "of tokens in one pass (DFlash: DFlashQwen3ForCausalLM) with a class no family serves: "
        "vLLM's block drafting is served for gemma4-dspark (Gemma4DSparkForCausalLM), "
        "qwen3-dflash (DFlashQwen3ForCausalLM), qwen3-dflash2 (DFlash2Qwen3ForCausalLM), "
        "qwen3-dspark (Qwen3DSparkForCausalLM) only, each proven on the engine (every position "
        "of the block through the FP8 head and the exact pick), not for this class; its head: "
        "the target's, shared (has_own_lm_head False): lm_head; needs a family record, a tiny "
        "checkpoint and an engine test"
    )
    # Where vLLM cannot build it either, that comes first; so for a class with a Markov term.
    both = verdict(**KIND_CASES["cannot draft here"], build_error="x")
    assert both.kind == "cannot build here"
    assert verdict(**KIND_CASES["markov term"], draft_error="x").kind == "cannot draft here"
    # A class a family serves stays served: its engine test is the measurement.
    dflash = by_name("qwen3-dflash").drafters["DFlashDraftModel"]
    claimed = dataclasses.replace(
        DFLASH, architecture="DFlashDraftModel", vllm_class=dflash, draft_error="x"
    )
    assert judge(claimed, all_families(), served()).kind == "served"


def test_a_dspark_class_with_steps_the_pick_after_the_term_cannot_see_says_which():
    """Muse Spark's DSpark on vLLM 0.34: the speculator applies its output transform (a
    multiplier and a tanh soft cap) to the head's logits plus the term before it picks, and
    its specialized decode drafts in a fused sampler: not the pick qwen3-dspark's is proven."""
    v = verdict(**KIND_CASES["own draft steps"])
    assert (v.status, v.kind) == (REFUSED, "own draft steps")
    assert v.reason == (
        "has what vLLM's DSpark speculator uses where the certified pick after the Markov term "
        f"does not reach, and no served family's class has ({TRANSFORM}): vLLM's draft is "
        "then picked from what it returns, or drafted by it, not from the head's logits plus "
        "the term that the pick (over the BF16 head plus the term, as qwen3-dspark's is for its "
        "class) makes exact; serving it needs the pick proven through that too: a family record "
        "of its own, a tiny checkpoint and an engine test"
    )
    # What a served family's class has too is engine-tested there: only the Markov term is left.
    mine = served()
    family, theirs = mine["Qwen3DSparkModel"]
    hooked = dataclasses.replace(theirs, speculator_hooks=(TRANSFORM.replace("C.", "Q."),))
    mine["Qwen3DSparkModel"] = (family, hooked)
    facts = ClassFacts("NewDrafterModel", "vllm.m:C", **KIND_CASES["own draft steps"])
    assert judge(facts, all_families(), mine).kind == "markov term"
    # What keeps vLLM from drafting with it here comes first, then these steps.
    drafts = verdict(**KIND_CASES["own draft steps"], draft_error="its hook reads a dropped weight")
    assert drafts.kind == "cannot draft here"
    assert drafts.reason.endswith("read from its source, it " + v.reason)


def test_a_class_whose_model_file_calls_a_kernel_absent_here_says_so_first():
    """MiniMax M3's and DeepSeek V4.1's DSpark on vLLM 0.34 here: their model files call CUDA
    kernels (kernel_facts) this build's kernels do not register; the Markov term follows."""
    v = verdict(**KIND_CASES["cannot run here"])
    assert (v.status, v.kind) == (REFUSED, "cannot run here")
    assert v.reason == (
        "vLLM cannot run it on this platform: its source calls a compiled operator this build "
        "lacks (its model file calls a kernel absent here): nothing can be run or proven here; "
        "read from its source, it " + verdict(**KIND_CASES["markov term"]).reason
    )
    # Building comes before running, running before drafting.
    assert verdict(**KIND_CASES["cannot run here"], build_error="x").kind == "cannot build here"
    assert verdict(**KIND_CASES["cannot run here"], draft_error="x").kind == "cannot run here"
    # A judgment that is not a candidate for serving keeps its own reason.
    assert verdict(**KIND_CASES["embedding head"], kernel_error="x").kind == "embedding head"


def test_an_architecture_no_judgment_fits_is_not_judged_yet():
    v = verdict(**KIND_CASES["not judged"])
    assert v.status == NOT_JUDGED
    assert v.reason == (
        "not judged yet: its logits come from model.mtp[].head, not where vLLM's proposer hands "
        "it the target's head (lm_head, model.layers[].shared_head.head), and no served family's "
        "class reads its head alike; until someone reads vLLM's class and judges it, the flag "
        "refuses it"
    )
    unread = judge(ClassFacts("Brand", read=False), all_families(), served())
    assert unread.status == NOT_JUDGED
    assert "could not be read" in unread.reason


def test_the_family_a_candidate_reads_like_is_the_closest_served_one():
    facts = ClassFacts("A", "vllm.model_executor.models.glm_ocr_mtp:GlmOcrMTP",
                       logits_heads=(MTP_LAYERS,), heads=(MTP_LAYERS,))  # fmt: skip
    # Its module's name is nearest a GLM family's (served: glm45-mtp, glm4-moe-lite-mtp).
    assert family_alike(facts, served()).name.startswith("glm")
    eagle3 = ClassFacts("B", "vllm.model_executor.models.foo_eagle3:Eagle3FooForCausalLM",
                        logits_heads=("lm_head",), heads=("lm_head",),
                        has_own_lm_head="per checkpoint", d2t=True)  # fmt: skip
    assert family_alike(eagle3, served()).name.endswith("-eagle3")  # d2t: EAGLE-3's
    eagle1 = dataclasses.replace(eagle3, d2t=False, has_own_lm_head="False")
    assert family_alike(eagle1, served()).name.endswith("-eagle1")  # an EAGLE drafter's
    # A family that drafts a block per step (DFlash, DSpark) is no EAGLE-3 draft's like.
    assert family_alike(dataclasses.replace(eagle3, vllm_class="vllm.m:DFlashQwen3ForCausalLM"),
                        served()).name.endswith("-eagle3")  # fmt: skip
    # An own head, or logits from elsewhere, reads like no family.
    assert family_alike(dataclasses.replace(facts, has_own_lm_head="True"), served()) is None
    assert family_alike(dataclasses.replace(facts, logits_heads=("x.head",)), served()) is None


def test_a_served_architecture_is_its_familys():
    for family, facts in served().values():
        v = judge(facts, all_families(), served())
        assert (v.status, v.kind, v.family) == (SERVED, "served", family.name)
        assert v.reason == (
            f"served by the {family.name} family: a private FP8 head, proven at every start"
        )


def test_a_served_architecture_whose_class_moved_is_refused_with_the_policys_reason():
    family = by_name("qwen35-mtp")
    moved = "vllm.models.qwen3_5.nvidia.mtp:Qwen3_5MoeMTP"
    v = judge(
        dataclasses.replace(MTP_LM_HEAD, architecture="Qwen3_5MoeMTP", vllm_class=moved),
        all_families(),
        served(),
    )
    assert (v.status, v.kind) == (REFUSED, "class moved")
    assert v.reason == unexpected_drafter_class(
        "Qwen3_5MoeMTP", moved, family.drafters["Qwen3_5MoeMTP"], family.name
    )


def test_an_environment_that_lacks_a_package_is_a_note_not_the_verdict():
    v = verdict(**KIND_CASES["reads like a family"],
                import_error="ModuleNotFoundError: No module named 'torchvision'")  # fmt: skip
    assert v.kind == "reads like a family"
    assert v.reason.endswith(
        "; vLLM cannot import its model file here (ModuleNotFoundError: No module named "
        "'torchvision'): the test-only stand-in tests/shims/torchvision (what the engine tests "
        "of the families whose model files import torchvision run with) gets it through that "
        "import without changing what it computes: an engine test of it runs with that on its "
        "path"
    )
    other = verdict(**KIND_CASES["reads like a family"],
                    import_error="ModuleNotFoundError: No module named 'flash_mla'")  # fmt: skip
    assert other.reason.endswith(
        "(ModuleNotFoundError: No module named 'flash_mla'): an engine test of it needs an "
        "environment where it imports"
    )


def test_head_reading_says_whose_head_and_where():
    assert head_reading(MTP_SHARED) == f"the target's, shared (an MTP share): {MTP_LAYERS}"
    assert head_reading(EAGLE3) == (
        "its own if its checkpoint has one, else the target's (has_own_lm_head per checkpoint): "
        "lm_head; d2t"
    )
    assert head_reading(ClassFacts("X", compute_logits=False)) == "none: no compute_logits"


def test_counts():
    verdicts = [verdict(**KIND_CASES[k]) for k in ("no head", "no head", "not judged")]
    verdicts.append(judge(served()["MiMoMTPModel"][1], all_families(), served()))
    assert counts(verdicts) == {
        "architectures": 4,
        "served": 1,
        "refused": 2,
        "not judged yet": 1,
        "refused_by_kind": {"no head": 2},
    }


def test_every_reason_is_written_in_the_contract():
    import re
    from pathlib import Path

    contract = Path(__file__).resolve().parents[1] / "docs" / "contract.md"
    section = contract.read_text(encoding="utf-8").split("## Drafters no family serves")[1]
    section = " ".join(section.split("\n## ")[0].split())
    for kind, (status, template) in KINDS.items():
        assert f"| `{kind}` | {status} |" in section, kind
        for literal in re.split(r"\{[^}]*\}", template):
            assert literal.strip() in section, (kind, literal)
