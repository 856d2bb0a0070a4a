"""The certified top-K and the pick after an added term (docs/certificate.md, "Certified top-K",
"A term added after the head"): every result is the reference's K best, value descending and
ties by ascending index, on random, outlier, tiny-tailed, near-duplicate, duplicated, padded and
suppressed heads; K = 1 is the certified argmax; adversarial ties at the K-th place go to the
lowest index; a weakened bound is caught; the pick after a term is vLLM's `logits + bias`
argmax / top-K; with no host sync nothing is read from the device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_certificate import (  # noqa: E402
    HIDDENS,
    KINDS,
    PROPERTY,
    blocked_mask,
    bound_for,
    fp8_logits,
    hand_head,
    make_head,
    no_host_reads,
    reference,
)

from bench import heads  # noqa: E402
from draft_head_fp8.certificate import (  # noqa: E402
    KERNEL_W8A16,
    KERNELS,
    STAGE_A,
    STAGE_B,
    STAGE_C,
    UNCERTIFIED,
    certified_pick,
)
from draft_head_fp8.certificate_topk import beyond, certified_top_k, ranked  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402


def reference_top_k(w, x, blocked, top, term=None):
    """The reference's K best: every logit exactly (``exact_logits``), the term added as vLLM
    adds it (``logits + bias``), then a stable descending sort (equal values by index)."""
    picked = reference(w, x, blocked)
    if term is not None:
        picked = picked + term
    best = picked.sort(dim=-1, descending=True, stable=True)
    return best.indices[:, :top], best.values[:, :top]


def check_top_k(w, x, valid, suppressed, kernel, *, top, k, wide_k, term=None, **weaken):
    q = quantize_per_tensor(w)
    blocked = blocked_mask(w.shape[0], valid, suppressed)
    f = fp8_logits(kernel, x, q)
    before = f.clone()
    out = certified_top_k(
        f, x, w, top=top, k=k, wide_k=wide_k, valid_rows=valid,
        bound=bound_for(w, q, kernel, **weaken), suppressed=suppressed, term=term,
    )  # fmt: skip
    want_indices, want_values = reference_top_k(w, x, blocked, top, term)
    assert torch.equal(f, before)  # the caller's logits are not touched
    assert torch.equal(out.indices, want_indices)
    assert torch.equal(out.values, want_values) and out.values.dtype == want_values.dtype
    assert int(out.counts.sum()) == x.shape[0] and int(out.counts[UNCERTIFIED]) == 0
    return out


def duplicated(w, x, seed, copies=6):
    """``copies`` exact copies of the row holding the 2nd-best logit of the first draft row,
    spread over the vocabulary (below and above it): a tie group across the K-th place."""
    gen = torch.Generator().manual_seed(seed)
    second = int(reference(w, x[:1], torch.zeros(w.shape[0], dtype=bool)).topk(2).indices[0, 1])
    at = torch.randperm(w.shape[0], generator=gen)[:copies]
    w = w.clone()
    w[at] = w[second].clone()
    return w


# ------------------------------------------------------------------------------------------
# (i) the reference's K best, in its order
# ------------------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=60)
@given(
    kind=st.sampled_from((*KINDS, "duplicated")),
    kernel=st.sampled_from(KERNELS),
    seed=st.integers(0, 2**31 - 1),
    vocab=st.sampled_from([64, 512, 2048]),
    hidden=st.sampled_from(HIDDENS),
    tokens=st.integers(1, 5),
    top=st.sampled_from([1, 2, 4, 8]),
    extra_k=st.sampled_from([0, 4, 8]),
    wide_k=st.sampled_from([0, 16, 64]),
)
def test_every_top_k_is_the_references(
    kind, kernel, seed, vocab, hidden, tokens, top, extra_k, wide_k
):
    base = "random" if kind == "duplicated" else kind
    w, x, valid, suppressed = make_head(base, seed, vocab, hidden, tokens)
    if kind == "duplicated":
        w = duplicated(w, x, seed)
    check_top_k(w, x, valid, suppressed, kernel, top=top, k=top + extra_k, wide_k=wide_k)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_top_one_is_the_certified_argmax(kind, kernel):
    w, x, valid, suppressed = make_head(kind, 11, 1024, 64, 6)
    q = quantize_per_tensor(w)
    f = fp8_logits(kernel, x, q)
    bound = bound_for(w, q, kernel)
    options = dict(k=2, wide_k=16, valid_rows=valid, bound=bound, suppressed=suppressed)
    one = certified_top_k(f, x, w, top=1, **options)
    pick = certified_pick(f.clone(), x, w, **options)
    assert torch.equal(one.indices[:, 0], pick.logits.argmax(-1))
    assert torch.equal(one.values[:, 0], pick.logits.amax(-1))
    assert torch.equal(one.counts, pick.counts)  # the same stages certify the same rows


def test_without_ties_it_is_torch_topk():
    # Where the K + 1 best reference values are distinct, the order is unique: torch.topk's.
    # BF16 keeps 8 significant bits, so two of the 9 best logits tie in most rows here: the
    # tie order is the common case, not an edge.
    seen = 0
    for seed in range(6):
        w, x, valid, _ = make_head("random", seed, 2048, 64, 6, peak=seed % 2 == 0)
        r = reference(w, x, torch.zeros(2048, dtype=bool))
        out = check_top_k(w, x, valid, None, KERNEL_W8A16, top=8, k=8, wide_k=64)
        top9 = r.topk(9).values
        distinct = (top9[:, 1:] != top9[:, :-1]).all(-1)
        seen += int(distinct.sum())
        assert torch.equal(out.indices[distinct], r.topk(8).indices[distinct])
        assert torch.equal(out.values, r.topk(8).values)  # values: always
    assert 8 <= seen < 36


def test_torch_topk_does_not_order_ties_by_index_but_a_stable_sort_does():
    # What the order rests on (measured on this torch, CPU): topk's ties follow its partial sort,
    # not the index, so the reference order is defined by a stable descending sort instead.
    gen = torch.Generator().manual_seed(0)
    tied = torch.randint(0, 4, (64, 1000), generator=gen).to(torch.bfloat16)
    stable = tied.sort(dim=-1, descending=True, stable=True)
    assert not torch.equal(tied.topk(8).indices, stable.indices[:, :8])
    assert torch.equal(tied.topk(8).values, stable.values[:, :8])
    equal = stable.values[:, 1:] == stable.values[:, :-1]
    assert (stable.indices[:, 1:] > stable.indices[:, :-1])[equal].all()


# ------------------------------------------------------------------------------------------
# (ii) ties at the K-th place
# ------------------------------------------------------------------------------------------

# Row 3: 64.2578125 in float32, 64.5 in BF16 (a tie with row 5), 64.0 from its FP8 copy. Row 5:
# 64.5 on the FP8 grid. Row 9: 66.5 on the grid, the best. K = 2: the tie at the K-th place
# goes to row 3, which the FP8 top-2 (9, 5) leaves out.
TIE = {3: [1.0] * 63 + [1.2578125], 5: [1.0] * 63 + [1.5], 9: [1.0] * 59 + [1.5] * 5}


def test_a_tie_at_the_kth_place_goes_to_the_lowest_index():
    w, x = hand_head(TIE)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    assert f.float().topk(2).indices.tolist() == [[9, 5]]
    out = check_top_k(w, x, 64, None, KERNEL_W8A16, top=2, k=2, wide_k=8)
    assert out.indices.tolist() == [[9, 3]]
    assert int(out.counts[STAGE_A]) == 0 and int(out.counts[STAGE_B]) == 1
    # With no wider stage, every row of the head serves it: the same answer.
    out = check_top_k(w, x, 64, None, KERNEL_W8A16, top=2, k=2, wide_k=0)
    assert int(out.counts[STAGE_C]) == 1


def test_the_tie_rule_lets_an_equal_bound_pass_only_after_the_kth_index():
    kth, kth_index = torch.tensor([5.0]), torch.tensor([3])
    inf = float("-inf")
    assert beyond(torch.tensor([[4.0, inf, inf, inf, 5.0]]), kth, kth_index).item()
    assert not beyond(torch.tensor([[4.0, 5.0, inf, inf, 4.0]]), kth, kth_index).item()
    assert not beyond(torch.tensor([[4.0, 5.5, inf, inf, 4.0]]), kth, kth_index).item()
    assert not beyond(torch.tensor([[4.0, float("nan"), inf, inf, 4.0]]), kth, kth_index).item()
    assert not beyond(torch.tensor([[inf] * 5]), torch.tensor([inf]), kth_index).item()


def test_ranked_orders_ties_by_index_and_counts_a_repeat_once():
    indices = torch.tensor([[7, 2, 9, 2, 4]])
    values = torch.tensor([[1.0, 3.0, 3.0, 3.0, 3.0]])
    got, best = ranked(indices, values, 4)
    assert got.tolist() == [[2, 4, 9, 7]] and best.tolist() == [[3.0, 3.0, 3.0, 1.0]]


@pytest.mark.parametrize("top", [2, 4])
def test_a_tie_group_wider_than_the_places_left_keeps_the_lowest_indices(top):
    # Ten exact copies of one row, the best row of the head: only the lowest `top` indices.
    w, x, valid, _ = make_head("random", 5, 512, 64, 3)
    best = int(reference(w, x[:1], torch.zeros(512, dtype=bool)).argmax())
    at = torch.randperm(512, generator=torch.Generator().manual_seed(1))[:10]
    w[at] = w[best].clone()
    out = check_top_k(w, x, valid, None, KERNEL_W8A16, top=top, k=top, wide_k=16)
    copies = sorted({best, *at.tolist()})
    assert out.indices[0].tolist() == copies[:top]


# ------------------------------------------------------------------------------------------
# (iii) a weakened bound is caught
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weaken", [{"scale": 0.5}, {"rounding": False}])
def test_a_weakened_bound_certifies_a_wrong_tie_at_the_kth_place(weaken):
    w, x = hand_head(TIE)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)

    def pick(**weakened):
        bound = bound_for(w, q, KERNEL_W8A16, **weakened)
        return certified_top_k(f, x, w, top=2, k=2, wide_k=8, valid_rows=64, bound=bound)

    wrong = pick(**weaken)
    assert int(wrong.counts[STAGE_A]) == 1 and wrong.indices.tolist() == [[9, 5]]
    right = pick()
    assert int(right.counts[STAGE_A]) == 0 and right.indices.tolist() == [[9, 3]]


def test_half_the_bound_certifies_a_wrong_top_two():
    # Row 7: every weight 1.046875 (67.0), each quantized down to 1.0: FP8 64.0, 3.0 below its
    # own, the error aligned with x. Rows 9 and 11 on the grid: 66.5 and 66.0, the FP8 top-2.
    # The reference's top-2 is (7, 9).
    w, x = hand_head({7: [1.046875] * 64, 9: [1.0] * 59 + [1.5] * 5, 11: [1.0] * 60 + [1.5] * 4})
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    r = reference(w, x, torch.zeros(64, dtype=bool))
    assert [float(f[0, i]) for i in (7, 9, 11)] == [64.0, 66.5, 66.0]
    assert [float(r[0, i]) for i in (7, 9, 11)] == [67.0, 66.5, 66.0]

    def pick(**weakened):
        bound = bound_for(w, q, KERNEL_W8A16, **weakened)
        return certified_top_k(f, x, w, top=2, k=2, wide_k=8, valid_rows=64, bound=bound)

    wrong = pick(scale=0.5)
    assert int(wrong.counts[STAGE_A]) == 1 and wrong.indices.tolist() == [[9, 11]]
    right = pick()
    assert int(right.counts[STAGE_A]) == 0 and right.indices.tolist() == [[7, 9]]


# ------------------------------------------------------------------------------------------
# (iv) the pick after a term added to the head's logits
# ------------------------------------------------------------------------------------------


def markov_term(x, vocab, rank, dtype, seed, strength):
    """DSpark's transition bias as vLLM computes it: a low-rank embedding through the
    ``markov_w2`` head, one BF16 GEMM (``logits_processor(markov_w2, embed)``), in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    embed = (torch.randn(x.shape[0], rank, generator=gen) * strength).to(torch.bfloat16)
    w2 = (torch.randn(vocab, rank, generator=gen) * 0.5).to(torch.bfloat16)
    return torch.nn.functional.linear(embed, w2).to(dtype)


@settings(PROPERTY, max_examples=40)
@given(
    kind=st.sampled_from(KINDS),
    kernel=st.sampled_from(KERNELS),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.bfloat16, torch.float32]),
    strength=st.sampled_from([0.1, 1.0, 4.0]),
    top=st.sampled_from([1, 3, 8]),
)
def test_every_pick_after_a_term_is_vllms(kind, kernel, seed, dtype, strength, top):
    w, x, valid, suppressed = make_head(kind, seed, 1024, 64, 4)
    term = markov_term(x, 1024, 16, dtype, seed, strength)
    out = check_top_k(w, x, valid, suppressed, kernel, top=top, k=top + 4, wide_k=32, term=term)
    if top == 1:  # vLLM's greedy draft: greedy_argmax(logits_i + bias), the first maximum
        blocked = blocked_mask(1024, valid, suppressed)
        assert torch.equal(out.indices[:, 0], (reference(w, x, blocked) + term).argmax(-1))


def test_the_term_changes_the_pick():
    # Not a vacuous check: with a strong term the head's own argmax is often not the draft's.
    changed = 0
    for seed in range(4):
        w, x, valid, _ = make_head("random", seed, 1024, 64, 6)
        term = markov_term(x, 1024, 16, torch.bfloat16, seed, 4.0)
        out = check_top_k(w, x, valid, None, KERNEL_W8A16, top=1, k=4, wide_k=32, term=term)
        head = reference(w, x, torch.zeros(1024, dtype=bool)).argmax(-1)
        changed += int((out.indices[:, 0] != head).sum())
    assert changed > 0


def test_a_rounding_of_the_addition_decides_a_tie_the_head_does_not_have():
    # Rows 2 and 6 on the FP8 grid: 56.0 and 64.5, row 6 the head's best by far. A BF16 term of
    # 4096 on both: 4152 and 4160.5 round to 4160 in BF16 (its step there is 32), a tie vLLM's
    # argmax gives to row 2. In float32 the term leaves them apart: row 6. The pick follows the
    # dtype vLLM adds in; row 2's bound (about 56.7) plus the term stays below 4160 in float32,
    # so only a comparison made after BF16's rounding sees that row 2 can tie.
    w, x = hand_head({2: [0.875] * 64, 6: [1.0] * 63 + [1.5]})
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    assert [float(f[0, 2]), float(f[0, 6])] == [56.0, 64.5]
    bound = bound_for(w, q, KERNEL_W8A16)
    term = torch.zeros(1, 64)
    term[0, [2, 6]] = 4096.0
    blocked = torch.zeros(64, dtype=bool)
    for dtype, want in ((torch.bfloat16, 2), (torch.float32, 6)):
        added = term.to(dtype)
        assert int((reference(w, x, blocked) + added).argmax(-1)) == want
        for k, wide_k in ((1, 0), (1, 8), (4, 8)):
            out = certified_top_k(
                f, x, w, top=1, k=k, wide_k=wide_k, valid_rows=64, bound=bound, term=added
            )
            assert int(out.indices[0, 0]) == want, (dtype, k, wide_k)
            if (dtype, k) == (torch.bfloat16, 1):  # row 2 was not a candidate: not at stage a
                assert int(out.counts[STAGE_A]) == 0
        check_top_k(w, x, 64, None, KERNEL_W8A16, top=2, k=2, wide_k=8, term=added)


# ------------------------------------------------------------------------------------------
# (v) no host synchronisation when none is allowed
# ------------------------------------------------------------------------------------------


def test_no_sync_reads_nothing_and_counts_what_it_could_not_prove():
    w, x, valid, _ = make_head("cluster", 2, 2048, 64, 8)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    term = markov_term(x, 2048, 16, torch.bfloat16, 2, 0.1)
    options = dict(top=4, k=4, wide_k=16, valid_rows=valid, bound=bound_for(w, q, KERNEL_W8A16))
    with no_host_reads():
        graph = certified_top_k(f, x, w, term=term, host_sync=False, **options)
    eager = certified_top_k(f, x, w, term=term, **options)
    assert int(graph.counts[STAGE_C]) == 0 and int(graph.counts.sum()) == 8
    assert int(graph.counts[UNCERTIFIED]) > 0  # 24 near-duplicates: some rows stay unproven
    assert torch.equal(eager.counts[:2], graph.counts[:2])
    assert int(eager.counts[STAGE_C]) == int(graph.counts[UNCERTIFIED])
    want, _ = reference_top_k(w, x, torch.zeros(2048, dtype=bool), 4, term)
    assert torch.equal(eager.indices, want)
    # Only an uncertified row may differ from the reference.
    differ = ~(graph.indices == want).all(-1)
    assert int(differ.sum()) <= int(graph.counts[UNCERTIFIED])


def test_top_must_fit_the_candidates_and_the_real_tokens():
    w, x, valid, _ = make_head("random", 0, 64, 32, 1)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    bound = bound_for(w, q, KERNEL_W8A16)
    for top, k, rows in ((4, 2, 64), (0, 2, 64), (8, 8, 4)):
        with pytest.raises(ValueError, match="need 1 <= top <= k"):
            certified_top_k(f, x, w, top=top, k=k, wide_k=0, valid_rows=rows, bound=bound)
