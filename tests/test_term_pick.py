"""The pick after DSpark's Markov term, one draft block at a time (``term_pick``; docs/
certificate.md, "A term added after the head"): vLLM's loop replayed in torch (the block's FP8
logits once, then per position the term from the token picked just before, then the pick); each
pick is ``argmax(BF16 head + term)``, the first maximum; a tie the term makes goes to the lower
index; a weakened bound is caught on that tie; the call order vLLM's loop keeps is enforced."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from test_certificate import bound_for, fp8_logits, hand_head, make_head, reference  # noqa: E402

from bench import heads  # noqa: E402
from draft_head_fp8.certificate import (  # noqa: E402
    COUNT_NAMES,
    KERNEL_SCALED_MM,
    KERNEL_W8A16,
    KERNELS,
    STAGE_A,
    STAGE_B,
)
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.term_pick import Block, TermOrderError, pick_after_term  # noqa: E402

WIDE = 32


def head_method(w, q, kernel, k, **weaken):
    """What the pick reads of the FP8 head method: its BF16 rows, k, bound and counts."""
    return SimpleNamespace(
        rescore_rows=w, rescore_k=k, real_rows=w.shape[0], suppressed=None,
        bound=bound_for(w, q, kernel, **weaken),
        pick_counts=torch.zeros(len(COUNT_NAMES), dtype=torch.int64),
    )  # fmt: skip


def markov(vocab, rank, seed, strength):
    """DSpark's term head: ``markov_w1`` embeds the previous token, ``markov_w2`` projects it to
    the vocabulary, one BF16 GEMM as vLLM's logits processor makes it."""
    gen = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(vocab, rank, generator=gen) * strength).to(torch.bfloat16)
    w2 = (torch.randn(vocab, rank, generator=gen) * 0.5).to(torch.bfloat16)
    return lambda previous: torch.nn.functional.linear(w1[previous], w2)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", range(3))
def test_each_position_is_picked_after_the_term_of_the_token_before(kernel, seed):
    requests, steps, vocab = 3, 4, 1024
    w, x, _, _ = make_head("random", seed, vocab, 64, requests * steps)
    q = quantize_per_tensor(w)
    method = head_method(w, q, kernel, k=4)
    term_of = markov(vocab, 16, seed, 4.0)
    # The whole call's activation terms, as the drafter makes them (scaled_mm: one scale).
    block = Block(x, fp8_logits(kernel, x, q), steps, method.bound.terms(x))
    exact = reference(w, x, torch.zeros(vocab, dtype=bool)).view(requests, steps, vocab)
    previous, moved = torch.tensor([5, 6, 7]), 0
    for step in range(steps):
        term = term_of(previous)
        block.take_term(term)
        picks = block.pick(method, WIDE)
        # vLLM's greedy draft after the term: greedy_argmax(logits_i + bias), the first maximum.
        assert torch.equal(picks, (exact[:, step] + term).argmax(-1))
        moved += int((picks != exact[:, step].argmax(-1)).sum())
        previous = picks
    assert moved > 0  # the term decided some picks: the check above is not the head's argmax
    assert int(method.pick_counts.sum()) == requests * steps


# Row 7: every weight 1.046875 (67.0), quantized to 1.0: FP8 64.0. Rows 9 and 11 on the FP8
# grid: 66.5 and 66.0. A term of +1 on row 11 ties it with row 7 at 67.0 after the addition;
# the first maximum is row 7, while the FP8 sums put row 11 first (67.0 against row 7's 64.0).
TIED = {7: [1.046875] * 64, 9: [1.0] * 59 + [1.5] * 5, 11: [1.0] * 60 + [1.5] * 4}


def tied_pick(**weaken):
    w, x = hand_head(TIED)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    term = torch.zeros(1, 64, dtype=torch.bfloat16)
    term[0, 11] = 1.0
    method = head_method(w, q, KERNEL_W8A16, k=1, **weaken)
    block = Block(x, f, 1, None)
    block.take_term(term)
    sums = reference(w, x, torch.zeros(64, dtype=bool)) + term
    assert [float(sums[0, i]) for i in (7, 9, 11)] == [67.0, 66.5, 67.0]
    assert int((f + term).argmax(-1)) == 11
    return block.pick(method, WIDE), method.pick_counts


def test_a_tie_the_term_makes_goes_to_the_lower_index():
    picks, counts = tied_pick()
    assert picks.tolist() == [7]
    assert int(counts[STAGE_A]) == 0 and int(counts[STAGE_B]) == 1


@pytest.mark.parametrize("weaken", [{"scale": 0.5}, {"scale": 0.6}])
def test_a_weakened_bound_certifies_the_fp8_pick_on_that_tie(weaken):
    picks, counts = tied_pick(**weaken)
    assert picks.tolist() == [11] and int(counts[STAGE_A]) == 1


def test_padding_cut_by_the_logits_processor_is_never_picked():
    # vLLM's logits processor returns the vocabulary only; the rows are padded to 64 per shard.
    w, x, _, _ = make_head("random", 3, 1024, 64, 2)
    w[1000:] = 0.0
    q = quantize_per_tensor(w)
    method = head_method(w, q, KERNEL_W8A16, k=4)
    method.real_rows = 1000
    term = torch.zeros(2, 1000, dtype=torch.bfloat16)
    term[:, 999] = 50.0
    f = heads.fp8_w8a16(x, q.weight, q.scale)[:, :1000]
    picks = pick_after_term(method, f, x, term, wide_k=WIDE)
    assert picks.tolist() == [999, 999]


def test_the_call_order_of_vllms_loop_is_enforced():
    w, x, _, _ = make_head("random", 0, 256, 64, 6)
    q = quantize_per_tensor(w)
    method = head_method(w, q, KERNEL_SCALED_MM, k=4)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    with pytest.raises(TermOrderError, match="is not requests x 4 steps"):
        Block(x, f, 4, None)
    block = Block(x, f, 3, None)
    term = torch.zeros(2, 256, dtype=torch.bfloat16)
    with pytest.raises(TermOrderError, match="picked before its Markov term"):
        block.pick(method, WIDE)
    with pytest.raises(TermOrderError, match="of shape"):
        block.take_term(torch.zeros(3, 256))
    block.take_term(term)
    with pytest.raises(TermOrderError, match="before the last one was picked"):
        block.take_term(term)
    for _ in range(3):
        block.pick(method, WIDE)
        if block.step < 3:
            block.take_term(term)
    with pytest.raises(TermOrderError, match="past the block"):
        block.take_term(term)
