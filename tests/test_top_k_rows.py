"""What the head hands a drafter that reads its top-K (``top_k_rows``; docs/certificate.md,
"Serving a top-K"): vLLM's own ``torch.topk`` of the served row returns the BF16 head's ids and
values, bit for bit, whatever ``torch.topk`` does among equal values: a row whose K + 1 best are
distinct holds those K exactly and nothing else; a row where they tie (a twin row at the K-th
place, or two equal values inside the K) is handed whole, every logit exact, and counted at
stage c."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from test_certificate import fp8_logits, make_head, reference  # noqa: E402
from test_term_pick import head_method  # noqa: E402

from draft_head_fp8.certificate import COUNT_NAMES, KERNELS, STAGE_C  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.top_k_rows import top_k_rows  # noqa: E402

WIDE = 32
TOP, VOCAB, TOKENS = 4, 1024, 6


def served_rows(w, x, kernel):
    q = quantize_per_tensor(w)
    method = head_method(w, q, kernel, k=TOP + 1)
    logits = fp8_logits(kernel, x, q).to(torch.bfloat16)
    return method, top_k_rows(method, logits, x, TOP, wide_k=WIDE)


def twin(w, x, row, place):
    """Row ``row``'s worst head row made the twin of its ``place``-th best (1-based)."""
    exact = reference(w, x, torch.zeros(VOCAB, dtype=bool))
    at = int(exact[row].sort(descending=True, stable=True).indices[place - 1])
    w[int(exact[row].argmin())] = w[at]
    return w


def assert_topk_is_the_references(seen, exact):
    want, got = exact.topk(TOP, dim=-1), seen.topk(TOP, dim=-1)
    assert torch.equal(got.values, want.values.to(seen.dtype))
    assert torch.equal(got.indices, want.indices)
    assert torch.equal(seen.argmax(-1), exact.argmax(-1))  # the greedy draft too


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("place", [TOP, TOP + 1, 2])
def test_torch_topk_of_the_served_rows_is_the_bf16_heads(kernel, seed, place):
    """A twin of the K-th best ties across the K boundary; of the 2nd, inside the K: row 0 is
    handed whole, exact. A twin of the (K+1)-th ties after the K, which no top-K reads (row 0
    whole only if BF16 ties it anyway: they are common). The rows without a tie that a bound
    proves hold exactly K values."""
    w, x, _, _ = make_head("random", seed, VOCAB, 64, TOKENS)
    w = twin(w, x, 0, place)
    exact = reference(w, x, torch.zeros(VOCAB, dtype=bool))
    method, seen = served_rows(w, x, kernel)
    assert_topk_is_the_references(seen, exact)
    best = exact.topk(TOP + 1, dim=-1).values
    free = (best[:, :-1] > best[:, 1:]).all(-1)
    if place <= TOP:
        assert not free[0]
        assert torch.equal(seen[0], exact[0].to(seen.dtype))  # the tied row: whole and exact
    whole = seen.isfinite().sum(-1) > TOP
    assert whole[~free].all()  # every tied row whole (and any row no bound proved)
    assert (seen[~whole].isfinite().sum(-1) == TOP).all()
    counts = method.pick_counts
    assert int(counts[STAGE_C]) == int(whole.sum())
    assert int(counts[COUNT_NAMES.index("uncertified")]) == 0
    assert int(counts.sum()) == TOKENS


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_row_of_ties_everywhere_is_served_whole(kernel):
    """Every head row equal: every value of a draft row ties, and torch.topk's choice among
    them is all there is to copy; the whole row, exact, is what it gets."""
    w, x, _, _ = make_head("random", 0, VOCAB, 64, TOKENS)
    w[:] = w[3]
    exact = reference(w, x, torch.zeros(VOCAB, dtype=bool))
    _, seen = served_rows(w, x, kernel)
    assert torch.equal(seen, exact.to(seen.dtype))
    assert_topk_is_the_references(seen, exact)


def test_without_the_distinct_rule_a_tie_at_the_kth_place_is_settled_by_index():
    """The rule that sends tied rows whole is what the serving needs: the certified top-K alone
    settles a K-th-place tie by index, which is a set torch.topk need not choose."""
    from test_certificate import bound_for

    from draft_head_fp8.certificate import KERNEL_W8A16
    from draft_head_fp8.certificate_topk import certified_top_k

    w, x, _, _ = make_head("random", 1, VOCAB, 64, TOKENS)
    w = twin(w, x, 0, TOP)
    q = quantize_per_tensor(w)
    logits = fp8_logits(KERNEL_W8A16, x, q).to(torch.bfloat16)
    bound = bound_for(w, q, KERNEL_W8A16)
    common = dict(k=TOP + 1, wide_k=WIDE, valid_rows=VOCAB, bound=bound)
    plain = certified_top_k(logits, x, w, top=TOP, **common)
    strict = certified_top_k(logits, x, w, top=TOP + 1, distinct=True, **common)
    assert plain.whole_at is None  # proven at stage a or b: the tie went to the lower index
    assert strict.whole_at is not None and 0 in strict.whole_at.tolist()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_drafter_that_reads_the_set_gets_a_whole_row_only_for_a_tie_at_the_kth_place(kernel):
    """DSpark's top-k path scatters the K best back into a row by token id: only the set
    matters. With ``set_only`` the served rows' top-K is the BF16 row's set, every value exact;
    each row whose K-th and (K+1)-th tie is whole; and rows that tie only inside the K (row 0:
    a twin of its 2nd best) hold just their K, where the order-keeping rows are whole."""
    saved = 0
    for seed in range(3):
        w, x, _, _ = make_head("random", seed, VOCAB, 64, TOKENS)
        w = twin(w, x, 0, 2)
        exact = reference(w, x, torch.zeros(VOCAB, dtype=bool))
        q = quantize_per_tensor(w)
        logits = fp8_logits(kernel, x, q).to(torch.bfloat16)
        rows = {}
        for only in (False, True):
            method = head_method(w, q, kernel, k=TOP + 1)
            rows[only] = top_k_rows(method, logits, x, TOP, wide_k=WIDE, set_only=only)
        seen, want = rows[True], exact.topk(TOP, dim=-1)
        got = seen.topk(TOP, dim=-1).indices
        assert torch.equal(got.sort(-1).values, want.indices.sort(-1).values)
        assert torch.equal(seen.gather(-1, want.indices), want.values.to(seen.dtype))
        whole = {only: r.isfinite().sum(-1) > TOP for only, r in rows.items()}
        best = exact.topk(TOP + 1, dim=-1).values
        assert whole[True][best[:, TOP - 1] == best[:, TOP]].all()
        assert not (whole[True] & ~whole[False]).any() and whole[False][0]
        saved += int((whole[False] & ~whole[True]).sum())
    assert saved > 0  # row 0 at least, unless a bound or a boundary tie sent it whole anyway


def test_rows_handed_whole_are_taken_from_the_heads_own_logits_when_given():
    """In the engine the whole rows are vLLM's own BF16 logits of the call (``certified_pick.
    stock_logits``: its op and shape, as with the flag off), not the certificate's float32 sums,
    which round differently now and then; only the whole rows come from it."""
    w, x, _, _ = make_head("random", 0, VOCAB, 64, TOKENS)
    w = twin(w, x, 0, TOP)
    exact = reference(w, x, torch.zeros(VOCAB, dtype=bool))
    stock = exact.to(torch.bfloat16) + 0  # a stand-in row source, one value nudged to tell it
    stock[0, 7] = stock[0, 7].item() - 0.5
    q = quantize_per_tensor(w)
    method = head_method(w, q, KERNELS[0], k=TOP + 1)
    logits = fp8_logits(KERNELS[0], x, q).to(torch.bfloat16)
    seen = top_k_rows(method, logits, x, TOP, wide_k=WIDE, whole=lambda: stock)
    whole = seen.isfinite().sum(-1) > TOP
    assert whole[0] and torch.equal(seen[0], stock[0])
    assert (seen[~whole].isfinite().sum(-1) == TOP).all()
