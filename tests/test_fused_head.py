"""The fused FP8 head and its certified pick (``fused_head.py``, docs/certificate.md, "The fused
kernel"), run in Triton's interpreter: stage 1's logits are the float32 reference rounded to BF16
to nearest (bit for bit where the sums are exact, the integer rounding on edge values, within the
bound everywhere), its block summaries are torch's; every pick is the BF16 head's, lowest index
among ties, on random, near-duplicate, tied, padded, suppressed and tensor-parallel heads; a
weakened bound picks wrong; stage 2 never reads the device when it may not.

Every kernel runs in one worker process, never in pytest's. Triton builds its own library
(``tl.zeros`` and the like) for the interpreter only when ``TRITON_INTERPRET=1`` is set before
triton is first imported, so a pytest process that had already imported triton (vLLM imports it)
could not interpret; and the pytest process must not carry the variable at all (engine
subprocesses inherit it; tests/test_triton_cpu_standin.py asserts it is unset). Nothing of
``draft_head_fp8.fused_head`` may cross back either: unpickling its classes would import triton
here. The functions named ``_in_worker_*`` run in the worker; ``worker`` calls them."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

# Triton is in the test environment (requirements/test-runners.txt): found, never imported here.
assert importlib.util.find_spec("triton") is not None, "triton is missing: run `make test`"
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_certificate import (  # noqa: E402
    PROPERTY,
    HostSync,
    blocked_mask,
    hand_head,
    make_head,
    no_host_reads,
    reference,
    two_shards,
)

from draft_head_fp8.certificate import (  # noqa: E402
    KERNEL_FUSED_W8A16,
    KERNELS,
    STAGE_A,
    STAGE_B,
    STAGE_C,
    UNCERTIFIED,
    logit_bound,
    logit_error_bound,
    row_error_norms,
)
from draft_head_fp8.fp8 import QuantizedHead, quantize_per_tensor  # noqa: E402

SUMMARY_N = 32  # fused_head.SUMMARY_N (test_the_kernels_run_in_the_worker_only checks)
INF = float("inf")


def _interpret() -> None:
    assert "triton" not in sys.modules, "triton came first: its library would not interpret"
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="module")
def worker():
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=_interpret) as pool:
        yield lambda fn, *args, **kwargs: pool.submit(fn, *args, **kwargs).result(timeout=300)


def fused_bound(w, q, **weaken):
    errors = row_error_norms(w, q, kernel=KERNEL_FUSED_W8A16)
    return logit_bound(errors, hidden=w.shape[1], kernel=KERNEL_FUSED_W8A16, **weaken)


def _head(w, valid, suppressed, q=None, weaken=None, **stages):
    from draft_head_fp8.fused_head import FusedHead

    q = quantize_per_tensor(w) if q is None else q
    bound = fused_bound(w, q, **(weaken or {}))
    return FusedHead.build(
        q.weight, q.scale, w, bound=bound, valid_rows=valid, suppressed=suppressed, **stages
    )


def _in_worker_blocks(w, x, valid, suppressed, q=None):
    head = _head(w, valid, suppressed, q)
    return tuple(head.head_blocks(x)), head.bound


def _in_worker_pick(w, x, valid, suppressed, *, host_sync=True, totals=None, **head):
    out = _head(w, valid, suppressed, **head).pick(x, host_sync=host_sync, totals=totals)
    return out.logits.contiguous(), out.counts, totals


def _in_worker_api(w, x, valid, suppressed, host_sync):
    from draft_head_fp8.fused_head import fused_certified_pick

    q = quantize_per_tensor(w)
    out = fused_certified_pick(
        x, q.weight, q.scale, w, bound=fused_bound(w, q), valid_rows=valid,
        suppressed=suppressed, host_sync=host_sync,
    )  # fmt: skip
    return out.logits.contiguous(), out.counts


def _in_worker_without_host_reads(w, x, valid, **stages):
    head = _head(w, valid, None, **stages)
    blocks = head.head_blocks(x)
    again = blocks._replace(logits=blocks.logits.clone(), upper=blocks.upper.clone())
    with no_host_reads():
        out = head.certify(x, blocks, host_sync=False)
        try:  # the guard works: eager mode reads the device
            head.certify(x, again)
        except HostSync:
            return out.logits.contiguous(), out.counts
    raise AssertionError("the eager pick read nothing: the guard is broken")


# ------------------------------------------------------------------------------------------
# Stage 1: the logits, their rounding, the block summaries
# ------------------------------------------------------------------------------------------


def check_summaries(blocks, x, bound, vocab):
    """Each block's largest logit and its first index are torch's; its upper bound is at least
    every token's U_j (in float64, from the served logits) and at most 2^-18 above."""
    logits, best, first, upper = blocks
    tokens, padded = logits.shape
    grouped = logits.float().view(tokens, -1, SUMMARY_N)
    assert torch.equal(best, grouped.amax(-1))
    offsets = torch.arange(0, padded, SUMMARY_N)
    assert torch.equal(first.long(), grouped.argmax(-1) + offsets)  # torch: the first maximum
    terms = torch.zeros(tokens, padded, dtype=torch.float64)
    terms[:, :vocab] = bound.terms(x).double() @ bound.rows.double()
    blocked = torch.isneginf(logits)
    f = logits.double().masked_fill(blocked, 0)
    every = ((1 - bound.rounding_slope) * f + terms).masked_fill(blocked, -INF)
    size = (f.abs() + terms).masked_fill(blocked, 0).view(tokens, -1, SUMMARY_N).amax(-1)
    top = every.view(tokens, -1, SUMMARY_N).amax(-1)
    assert torch.equal(torch.isneginf(upper), torch.isneginf(top))  # all blocked: -inf
    live = torch.isfinite(top)
    assert (upper.double()[live] >= top[live]).all()  # rounded up: never below a token's U_j
    assert (upper.double()[live] <= (top + size * 2.0**-18)[live]).all()


def test_stage_one_is_the_reference_bit_for_bit_where_sums_are_exact(worker):
    # Integer activations and e4m3 integers under a scale of 2^-8 (row 0 holds the amax 1.75),
    # and rows of e4m3 subnormals (m 2^-9, m < 8): every float32 sum is exact in any order, so
    # only the rounding to BF16 (ties included: integers past 256 have more bits than BF16
    # keeps) can differ, and must not.
    gen = torch.Generator().manual_seed(5)
    vocab, hidden, tokens = 1000, 96, 5
    w = torch.randint(-16, 17, (vocab, hidden), generator=gen) * 2.0**-8
    w[100:200] = torch.randint(-7, 8, (100, hidden), generator=gen) * 2.0**-17
    w[0, 0] = 1.75
    x = torch.randint(-8, 9, (tokens, hidden), generator=gen).to(torch.bfloat16)
    w, suppressed = w.to(torch.bfloat16), torch.tensor([3, 500])
    q = quantize_per_tensor(w)
    assert float(q.scale) == 2.0**-8 and (q.weight[100:200].view(torch.uint8) & 0x78 == 0).all()
    blocks, bound = worker(_in_worker_blocks, w, x, 990, suppressed)
    want = (x.float() @ (q.weight.float() * q.scale).t()).to(torch.bfloat16)
    blocked = blocked_mask(vocab, 990, suppressed)
    got = blocks[0][:, :vocab]
    assert torch.equal(got[:, ~blocked], want[:, ~blocked])
    assert torch.isneginf(blocks[0][:, blocked.nonzero().squeeze(-1)]).all()
    assert torch.isneginf(blocks[0][:, vocab:]).all()
    exact = x.float() @ (q.weight.float() * q.scale).t()
    assert (exact != want.float()).any()  # some sums had more bits than BF16 keeps
    check_summaries(blocks, x, bound, vocab)


@pytest.mark.parametrize("kind", ["random", "outliers", "tiny tail"])
def test_stage_one_is_within_the_bound(worker, kind):
    w, x, valid, suppressed = make_head(kind, 11, 2048, 128, 6)
    q = quantize_per_tensor(w)
    blocks, bound = worker(_in_worker_blocks, w, x, valid, suppressed)
    f = blocks[0][:, : w.shape[0]]
    blocked = blocked_mask(w.shape[0], valid, suppressed)
    want = (x.float() @ (q.weight.float() * q.scale).t()).to(torch.bfloat16)
    # Another summation order (and the scale inside the sum): at most one BF16 step apart.
    ulp = want.float().abs() * 2.0**-7 + 2.0**-133
    apart = (f.float() - want.float()).abs()[:, ~blocked]
    assert (apart <= ulp[:, ~blocked]).all() and float((apart == 0).float().mean()) > 0.99
    r = reference(w, x, blocked)
    error = (f.double() - r.double()).abs()[:, ~blocked]
    assert (error <= logit_error_bound(f, x, bound).double()[:, ~blocked]).all()
    check_summaries(blocks, x, bound, w.shape[0])


HEX_DIGITS = 6  # a float32 significand: 24 bits, six hex digits


def digit_rows():
    """Significands as six hex digits (value sum d_k 16^-k), chosen for BF16's rounding (it
    keeps the first two digits when the first is >= 8): ties to even both ways, just above and
    below a half, a carry through every kept bit into the exponent; then random ones."""
    edges = [
        [8, 0, 8, 0, 0, 0], [8, 1, 8, 0, 0, 0], [8, 0, 8, 0, 0, 1], [8, 0, 7, 15, 15, 15],
        [15, 15, 8, 0, 0, 0], [15, 15, 7, 15, 15, 15], [15, 15, 15, 15, 15, 15],
        [1, 0, 0, 8, 0, 0], [1, 0, 1, 8, 0, 0], [1, 15, 15, 15, 15, 15], [0, 0, 0, 0, 0, 0],
    ]  # fmt: skip
    gen = torch.Generator().manual_seed(2)
    digits = torch.cat([torch.tensor(edges), torch.randint(0, 16, (117, 6), generator=gen)])
    return torch.cat([digits, -digits]).float()  # and every one negative


def test_the_integer_rounding_is_torchs_on_edge_values(worker):
    # Head row j holds the digits, draft row m the powers 2^(e_m - 4k): logit (m, j) is
    # 2^e_m * sum_k d_jk 16^-k, exact in float32 whatever the order, from 2^-106 (its last
    # powers 2^-126: the interpreter reads a BF16 subnormal as 0, a flush the bound allows but
    # this test must not meet) to float32's largest value (e = 124, all digits 15, which BF16
    # rounds to inf). The kernel's BF16 bits must be torch's round-to-nearest-even.
    digits = digit_rows()
    exponents = torch.tensor([0, 1, -1, 7, -9, 20, -20, 60, -60, 100, -100, 124, -106, 3, 40, 13])
    powers = 2.0 ** (exponents[:, None] - 4 * torch.arange(HEX_DIGITS)).double()
    hidden = 16  # zeros past the digits: more of the kernel's masking in play
    x = torch.zeros(exponents.numel(), hidden, dtype=torch.bfloat16)
    x[:, :HEX_DIGITS] = powers.to(torch.bfloat16)
    assert torch.equal(x[:, :HEX_DIGITS].double(), powers)
    vocab = digits.shape[0]
    w = torch.zeros(vocab, hidden, dtype=torch.bfloat16)
    w[:, :HEX_DIGITS] = digits.to(torch.bfloat16)
    q = QuantizedHead(w.to(torch.float8_e4m3fn), torch.ones(1), 15.0, 15.0, 15.0)
    assert torch.equal(q.weight.float(), w.float())
    exact = powers @ digits.double().t()
    assert torch.equal(exact.float().double(), exact)  # every logit a float32 value
    blocks, _ = worker(_in_worker_blocks, w, x, vocab, None, q)
    got = blocks[0][:, :vocab].view(torch.int16)
    want = exact.float().to(torch.bfloat16).view(torch.int16)
    assert torch.equal(got, want)
    rounded = want.view(torch.bfloat16)
    assert torch.isposinf(rounded).any() and torch.isneginf(rounded).any()  # the overflows


# ------------------------------------------------------------------------------------------
# The pick: every certified row, and every row with host sync, is the reference argmax
# ------------------------------------------------------------------------------------------


def check_pick(w, x, logits, counts, valid, suppressed, *, host_sync=True):
    blocked = blocked_mask(w.shape[0], valid, suppressed)
    r = reference(w, x, blocked)
    assert int(counts.sum()) == x.shape[0]
    assert torch.isneginf(logits[:, blocked]).all()
    exact = logits.argmax(-1) == r.argmax(-1)  # vLLM's greedy draft: the first maximum
    if host_sync:
        assert exact.all() and int(counts[UNCERTIFIED]) == 0
        assert torch.equal(logits.float().amax(-1), r.float().amax(-1))
    else:
        assert int(counts[STAGE_C]) == 0
        assert int(exact.sum()) >= int(counts[STAGE_A] + counts[STAGE_B])
    return r


KINDS = ("random", "outliers", "tiny tail", "cluster", "padding", "suppressed")


@settings(PROPERTY, max_examples=16)
@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31 - 1),
    vocab=st.sampled_from([256, 1000, 2048]),
    hidden=st.sampled_from([32, 64, 128]),
    tokens=st.integers(1, 6),
    peak=st.booleans(),
    host_sync=st.booleans(),
)
def test_every_certified_pick_is_the_reference_argmax(
    worker, kind, seed, vocab, hidden, tokens, peak, host_sync
):
    w, x, valid, suppressed = make_head(kind, seed, vocab, hidden, tokens, peak=peak)
    logits, counts = worker(_in_worker_api, w, x, valid, suppressed, host_sync)
    assert logits.shape == (tokens, vocab)
    check_pick(w, x, logits, counts, valid, suppressed, host_sync=host_sync)
    if host_sync:
        return
    # Certified rows are exact; the rest were served by stage b: the same counts as eager's.
    eager = worker(_in_worker_api, w, x, valid, suppressed, True)[1]
    assert torch.equal(eager[:2], counts[:2]) and int(eager[STAGE_C]) == int(counts[UNCERTIFIED])


def test_near_duplicate_clusters_need_more_than_stage_a(worker):
    # 24 rows closer than the FP8 step at the top of every draft row, scattered over the
    # blocks; 20 draft rows: two launches (16 + 4).
    totals = torch.zeros(4, dtype=torch.int64)
    for seed in range(3):
        w, x, valid, _ = make_head("cluster", seed, 2048, 64, 20)
        logits, counts, totals = worker(_in_worker_pick, w, x, valid, None, totals=totals)
        check_pick(w, x, logits, counts, valid, None)
    assert int(totals.sum()) == 60 and int(totals[STAGE_B] + totals[STAGE_C]) > 0


def tie_head(low: int, high: int, vocab: int = 1024):
    # Row ``low``: 64.2578125 in float32, 64.5 in BF16 (a tie with row ``high``: 64.5 on the
    # FP8 grid), while its FP8 copy sums to 64.25 and rounds (to even) to 64.0.
    return hand_head({low: [1.0] * 63 + [1.2578125], high: [1.0] * 63 + [1.5]}, vocab=vocab)


def test_a_tie_across_a_summary_block_boundary_goes_to_the_lowest_index(worker):
    low, high = SUMMARY_N - 1, SUMMARY_N  # the last row of block 0, the first of block 1
    w, x = tie_head(low, high)
    r = check_pick(w, x, *worker(_in_worker_pick, w, x, 1024, None)[:2], 1024, None)
    assert (float(r[0, low]), float(r[0, high]), int(r.argmax())) == (64.5, 64.5, low)
    blocks, _ = worker(_in_worker_blocks, w, x, 1024, None)
    assert (float(blocks[0][0, low]), float(blocks[0][0, high])) == (64.0, 64.5)
    assert int(blocks[0].argmax()) == high  # the plain FP8 pick is wrong
    # One block at stage a (``high``'s): ``low``'s block can still reach its best: stage b.
    logits, counts, _ = worker(_in_worker_pick, w, x, 1024, None, stage_a_blocks=1)
    check_pick(w, x, logits, counts, 1024, None)
    assert counts.tolist() == [0, 1, 0, 0]


@pytest.mark.parametrize("kind", ["padding", "suppressed"])
def test_padding_and_suppressed_tokens_are_never_picked(worker, kind):
    # Padding rows are zeros above every real (negative) logit; suppressed rows are the draft
    # rows' own direction: the largest FP8 logits of all.
    w, x, valid, suppressed = make_head(kind, 7, 1024, 64, 4, peak=True)
    logits, counts, _ = worker(_in_worker_pick, w, x, valid, suppressed)
    check_pick(w, x, logits, counts, valid, suppressed)
    assert int(counts[STAGE_A] + counts[STAGE_B]) == 4  # certified without every row


@pytest.mark.parametrize("tie", [False, True])
def test_two_shards_compose_to_the_global_pick(worker, tie):
    vocab, hidden = 1000, 64  # rank 1 holds 488 real rows and 24 rows of padding
    w, x, _, _ = make_head("cluster", 3, vocab, hidden, 5)
    want, shards = two_shards(w, x, tie)
    gathered = []
    for rows, real, q in shards:
        gathered.append(worker(_in_worker_pick, rows, x, real, None, q=q)[0])
    logits = torch.cat(gathered, -1)[:, :vocab]  # vLLM's all-gather, padding dropped
    assert torch.equal(logits.argmax(-1), want)


# ------------------------------------------------------------------------------------------
# A weakened bound is caught: the certificate is what makes the pick exact
# ------------------------------------------------------------------------------------------

ONE_BLOCK = dict(stage_a_blocks=1, stage_b_blocks=0)  # stage a's one block, or every row


@pytest.mark.parametrize("weaken", [{"scale": 0.01}, {"rounding": False}])
def test_a_weakened_bound_certifies_a_wrong_tie(worker, weaken):
    w, x = tie_head(SUMMARY_N - 1, SUMMARY_N)
    wrong = worker(_in_worker_pick, w, x, 1024, None, weaken=weaken, **ONE_BLOCK)
    assert int(wrong[1][STAGE_A]) == 1  # certified at once ...
    assert int(wrong[0].argmax()) == SUMMARY_N  # ... on the tie's higher index: wrong
    right = worker(_in_worker_pick, w, x, 1024, None, **ONE_BLOCK)
    assert right[1].tolist() == [0, 0, 1, 0] and int(right[0].argmax()) == SUMMARY_N - 1


def test_half_the_bound_certifies_a_wrong_token(worker):
    # Row 40: every weight 1.046875 (67.0 in all), each quantized down to 1.0: FP8 logit 64.0,
    # the FP8 error aligned with x. Row 9, in another block: 66.5 on the grid, the FP8 top-1.
    w, x = hand_head({40: [1.046875] * 64, 9: [1.0] * 59 + [1.5] * 5}, vocab=1024)
    r = reference(w, x, torch.zeros(1024, dtype=bool))
    assert (float(r[0, 40]), float(r[0, 9])) == (67.0, 66.5)
    wrong = worker(_in_worker_pick, w, x, 1024, None, weaken={"scale": 0.5}, **ONE_BLOCK)
    assert int(wrong[1][STAGE_A]) == 1 and int(wrong[0].argmax()) == 9
    right = worker(_in_worker_pick, w, x, 1024, None, **ONE_BLOCK)
    assert int(right[1][STAGE_A]) == 0 and int(right[0].argmax()) == 40


# ------------------------------------------------------------------------------------------
# Stage 2 with no host sync: nothing read, static shapes
# ------------------------------------------------------------------------------------------


def test_no_sync_reads_nothing_and_counts_the_uncertified(worker):
    w, x, valid, _ = make_head("cluster", 2, 2048, 64, 8)
    stages = dict(stage_a_blocks=1, stage_b_blocks=1)
    logits, counts = worker(_in_worker_without_host_reads, w, x, valid, **stages)
    check_pick(w, x, logits, counts, valid, None, host_sync=False)
    assert int(counts[UNCERTIFIED]) > 0  # two blocks of 64 for 24 near-duplicates
    eager = worker(_in_worker_pick, w, x, valid, None, **stages)[1]
    assert torch.equal(eager[:2], counts[:2]) and int(eager[STAGE_C]) == int(counts[UNCERTIFIED])


def _in_worker_refusal(w, kernel):
    from draft_head_fp8.fused_head import FusedHead

    q = quantize_per_tensor(w)
    bound = logit_bound(row_error_norms(w, q, kernel=kernel), hidden=w.shape[1], kernel=kernel)
    try:
        FusedHead.build(q.weight, q.scale, w, bound=bound, valid_rows=w.shape[0])
    except ValueError as refusal:
        return str(refusal)
    return None


def test_a_bound_made_for_another_kernel_is_refused(worker):
    # w8a16's bound is looser (it allows the CPU op's misread), scaled_mm's looser still: both
    # would be sound here, but a head serves the bound made for its own arithmetic.
    w, _, _, _ = make_head("random", 0, 64, 32, 1)
    for kernel in KERNELS:
        assert "fused_w8a16" in worker(_in_worker_refusal, w, kernel)
    assert worker(_in_worker_refusal, w, KERNEL_FUSED_W8A16) is None


def _in_worker_summary_n():
    from draft_head_fp8 import fused_head

    return fused_head.SUMMARY_N


def test_the_kernels_run_in_the_worker_only(worker):
    assert worker(_in_worker_summary_n) == SUMMARY_N
    assert "draft_head_fp8.fused_head" not in sys.modules and "TRITON_INTERPRET" not in os.environ
