"""The certified pick on the real engine (docs/certificate.md), on the case it exists for: the
shipped trained EAGLE-1 pair with near-duplicate rows in the target's head (three tokens the
target generates most, each with 23 copies of its row times 1 + 1e-2 N(0, 1): closer than the
FP8 step, tiny/near_duplicates.py). Four engines on vLLM 0.34's MRv2: flag off; flag on with the
certificate (the default); flag on with only the top-8 rescored; flag on with the fused Triton
kernel (its own stages: whole blocks of 32 tokens rescored). With the certificate every pick
is the BF16 head's and vLLM counts what it counts flag off; the boot's end-of-serving record says
how many draft rows needed more than the top-8. Without it, picks are lost: the case is a real
one, and the test could fail."""

from __future__ import annotations

import json

import pytest
from engine_support import FP8_EVERYWHERE, PROMPTS, V034, serve

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import list_proofs, proof_folder
from draft_head_fp8.tiny import shipped_pair
from draft_head_fp8.tiny.near_duplicates import build

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    root = tmp_path_factory.mktemp("near-duplicates")
    pair, written = build(shipped_pair("llama-eagle1"), root / "pair", PROMPTS)
    runs = {}
    for name, flag, settings in (
        ("off", False, {}),
        ("certified", True, FP8_EVERYWHERE),
        ("top-8 only", True, {**FP8_EVERYWHERE, "DRAFT_HEAD_FP8_CERTIFY": "off"}),
        # The fused Triton kernel (scan + certified pick), in Triton's interpreter here.
        ("fused", True, {**FP8_EVERYWHERE, "DRAFT_HEAD_FP8_KERNEL": "triton"}),
    ):
        tmp = root / name.replace(" ", "-")
        tmp.mkdir()
        runs[name] = serve(tmp, pair, flag=flag, env=settings, engine=V034.name)
        assert runs[name].launch.ok, runs[name].launch.tail(40)
    return written, runs


def test_the_head_holds_clusters_of_near_duplicate_rows(clustered):
    written, _ = clustered
    assert len(written) == 3 and all(len(rows) == 23 for rows in written.values())


def test_certified_every_pick_is_the_bf16_heads_and_vllm_counts_as_flag_off(clustered):
    _, runs = clustered
    off, on = runs["off"].facts, runs["certified"].facts
    agreement = on["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    assert on["spec_decode"] == off["spec_decode"] and on["texts"] == off["texts"]
    assert on["spec_decode"]["num_accepted_tokens"] > 20
    counts = on["after_generate"]["certificate"]["counts"]
    assert sum(counts.values()) == agreement["steps"]
    assert counts["stage_b"] + counts["stage_c"] > 0  # the clusters needed more than the top-8
    assert counts["uncertified"] == 0


def test_the_boot_keeps_how_many_rows_needed_more_than_the_top_k(clustered):
    _, runs = clustered
    run = runs["certified"]
    (boot,) = Archive(run.archive).boots()
    assert Archive(run.archive).verify().ok
    (end,) = list_proofs(boot)
    assert end["update"]["kind"] == "end_of_serving"
    record = json.loads(boot.read_bytes(f"{proof_folder(1)}/diagnostics/serving-rank0.json"))
    assert record["certificate"]["on"] is True
    assert record["certificate"]["counts"] == run.facts["after_generate"]["certificate"]["counts"]
    diagnostics = json.loads(boot.read_bytes("diagnostics/post_share-rank0.json"))
    assert diagnostics["certificate"]["counts"] == {
        "stage_a": 0, "stage_b": 0, "stage_c": 0, "uncertified": 0,
    }  # fmt: skip


def test_without_the_certificate_the_top_8_loses_picks_on_this_head(clustered):
    _, runs = clustered
    plain = runs["top-8 only"].facts
    assert plain["after_generate"]["certificate"] == {"on": False, "counts": None}
    agreement = plain["draft_agreement"]
    assert agreement["agree"] < agreement["steps"]


def test_the_fused_kernel_certifies_every_pick_on_this_head_too(clustered):
    _, runs = clustered
    off, fused = runs["off"].facts, runs["fused"].facts
    assert fused["after_start"]["receipt"]["head_kernel"] == "FusedW8A16HeadKernel"
    agreement = fused["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    assert fused["spec_decode"] == off["spec_decode"] and fused["texts"] == off["texts"]
    counts = fused["after_generate"]["certificate"]["counts"]
    assert sum(counts.values()) == agreement["steps"] and counts["uncertified"] == 0
    assert Archive(runs["fused"].archive).verify().ok
