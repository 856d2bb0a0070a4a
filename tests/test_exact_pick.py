"""The exact pick's evidence (docs/contract.md, "Exact draft tokens") from real CPU tensors: the
rows are the hashed BF16 head and none of the target's tensors; every check alone; and the
cross-rank check of a tensor-parallel boot."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from draft_head_fp8 import HeadFp8EligibilityError  # noqa: E402
from draft_head_fp8.evidence.exact_pick import (  # noqa: E402
    PICK_CHECKS,
    pick_record,
    pick_results,
    validate_pick,
)
from draft_head_fp8.evidence.ranks import cross_rank_problems, rank_summary  # noqa: E402
from draft_head_fp8.families.family import resolve  # noqa: E402
from draft_head_fp8.fp8 import tensor_sha256  # noqa: E402
from tools.vllm_standins import TargetLM  # noqa: E402

VOCAB, HIDDEN = 256, 32


def world(*, k=4, rows_are="draft source"):
    """A target, and a drafter after the share: its embedding is the target's; the head's method
    kept the draft's own BF16 rows, hashed at load."""
    target_embed = nn.Embedding(VOCAB, 64, dtype=torch.bfloat16).requires_grad_(False)
    target = TargetLM(target_embed)
    draft_source = (torch.randn(VOCAB, HIDDEN) * 0.05).to(torch.bfloat16)
    drafter = nn.Module()
    drafter.model = nn.Module()
    drafter.model.embed_tokens = target_embed  # the share
    rows = {"draft source": draft_source, "target embed": target_embed.weight}.get(rows_are)
    sha = tensor_sha256(draft_source)
    method = SimpleNamespace(
        rescore_k=k,
        rescore_rows=rows if k else None,
        real_rows=VOCAB,
        diagnostics={
            "source_sha256": sha,
            "source_data_ptr": draft_source.data_ptr(),
            "source_shape": [VOCAB, HIDDEN],
            "checkpoint": {"sha256": sha},
        },
    )
    return method, drafter, target


def record(**kwargs):
    method, drafter, target = world(**kwargs)
    return pick_record(
        method=method, modules=resolve(drafter, target), draft_sample_method="greedy"
    )


def test_the_real_rows_pass_every_check():
    r = record()
    assert r["top_k"] == 4 and r["rows"]["dtype"] == "torch.bfloat16"
    assert r["rows_are_hashed_source"] and r["rows_sha256_equals_checkpoint"]
    assert not (
        r["rows_is_draft_embed"] or r["rows_is_target_embed"] or r["rows_is_target_lm_head"]
    )
    assert not r["rows_share_storage_with_target"]
    validate_pick(r)
    assert all(result["passed"] for result in pick_results(r))


def test_plain_fp8_keeps_no_rows():
    r = record(k=0)
    assert r["rows"] is None and "may differ" in r["guarantee"]
    validate_pick(r)


def test_rows_that_are_the_targets_embedding_are_refused():
    r = record(rows_are="target embed")
    with pytest.raises(HeadFp8EligibilityError, match="not the tensor hashed against"):
        validate_pick(r)
    assert r["rows_is_target_embed"] and r["rows_is_draft_embed"]  # the share made them one


MUTATIONS = {
    "top-k in range": lambda r: r.__setitem__("top_k", 65),
    "rows kept only to rescore": lambda r: r.__setitem__("rows", None),
    "rows are BF16": lambda r: r["rows"].__setitem__("dtype", "torch.float8_e4m3fn"),
    "rows are the checkpoint's bytes": lambda r: r.__setitem__(
        "rows_sha256_equals_checkpoint", False
    ),
    "rows are none of the target's": lambda r: r.__setitem__(
        "rows_share_storage_with_target", True
    ),
    "rows source known": lambda r: r.__setitem__("rows_source", "the draft's cache"),
    # A drafter reading the target's head must rescore from that head's very weight.
    "rows are the target head's weight": lambda r: r.__setitem__("rows_source", "target_lm_head"),
}


def test_every_check_alone():
    assert [c.label for c in PICK_CHECKS] == list(MUTATIONS)
    base = record()
    for check in PICK_CHECKS:
        r = copy.deepcopy(base)
        MUTATIONS[check.label](r)
        with pytest.raises(HeadFp8EligibilityError) as caught:
            validate_pick(r)
        assert str(caught.value) == check.message


@pytest.mark.parametrize("junk", [None, [], "x", {"top_k": "4"}, {"top_k": 4, "rows": "torch"}])
def test_junk_is_refused_by_name(junk):
    with pytest.raises(HeadFp8EligibilityError):
        validate_pick(junk)


def summary(rank, start, end, **over):
    receipt = {"head_vocab_range": [start, end], "head_vocab_padded_size": 2048}
    base = dict(rank=rank, tp_size=2, failure=None, receipt=receipt, scale=0.001, top_k=8)
    return rank_summary(**{**base, **over})


def test_ranks_that_tile_and_agree_may_serve():
    assert cross_rank_problems([summary(0, 0, 1024), summary(1, 1024, 2048)], 2) == []


@pytest.mark.parametrize(
    "summaries, problem",
    [
        ([summary(0, 0, 1024), summary(1, 1024, 2048, failure="bad shard")], "rank 1 failed"),
        ([summary(0, 0, 1024), summary(1, 0, 1024)], "do not tile"),
        ([summary(0, 0, 1024), summary(1, 1024, 2048, scale=0.002)], "different per-tensor"),
        ([summary(0, 0, 1024), summary(1, 1024, 2048, top_k=4)], "different top-k"),
        ([summary(0, 0, 1024)], "expected 0..1"),
        ([summary(0, 0, 1024), summary(1, 1024, 2048, tp_size=4)], "TP sizes"),
    ],
)
def test_ranks_that_disagree_are_refused(summaries, problem):
    assert any(problem in p for p in cross_rank_problems(summaries, 2))
