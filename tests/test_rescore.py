"""Exact draft tokens (docs/contract.md, "Exact draft tokens"): the FP8 scan with exact top-k
rescoring, on real tensors: the pick is the BF16 head's whenever it is among the FP8 top-k, no
other logit can outrank the candidates, vocab padding never wins, at every batch size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from draft_head_fp8.evidence.exact_pick import guarantee  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.rescore import rescore_top_k  # noqa: E402

VOCAB, HIDDEN = 4096, 64


def head(seed: int, vocab: int = VOCAB, hidden: int = HIDDEN, padding: int = 0):
    """A BF16 head with a few heavy rows (as real heads have), its FP8 copy, and padding rows of
    zeros at the end, as ``ParallelLMHead`` pads its shard."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, hidden, generator=gen) * 0.05
    w[torch.randint(0, vocab, (8,), generator=gen)] *= 6
    w = torch.cat([w, torch.zeros(padding, hidden)]).to(torch.bfloat16)
    return w, quantize_per_tensor(w)


def fp8_logits(x: torch.Tensor, q) -> torch.Tensor:
    """What a W8A16 FP8 head returns: BF16 activations against the dequantized FP8 weight."""
    return (x.float() @ (q.weight.float() * q.scale).t()).to(torch.bfloat16)


def exact_logits(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.float() @ w.float().t()).to(torch.bfloat16)


@pytest.mark.parametrize("tokens", range(1, 17))
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_pick_is_the_bf16_pick_whenever_it_is_a_candidate(tokens, k):
    w, q = head(seed=tokens)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(100 + tokens)) * 3
    x = x.to(torch.bfloat16)
    scanned = fp8_logits(x, q)
    candidates = scanned.topk(k, dim=-1).indices
    reference = exact_logits(x, w)
    out = rescore_top_k(scanned.clone(), x, w, k=k, valid_rows=VOCAB)
    best = reference.argmax(-1)
    covered = (candidates == best[:, None]).any(-1)
    assert (out.argmax(-1)[covered] == best[covered]).all()
    # Candidates carry the exact BF16 logits; everything else is strictly below all of them.
    assert torch.equal(out.gather(-1, candidates), reference.gather(-1, candidates))
    others = torch.ones_like(out, dtype=torch.bool).scatter_(-1, candidates, False)
    floor = out.gather(-1, candidates).amin(-1, keepdim=True)
    assert (out.masked_fill(~others, float("-inf")) < floor).all()


def test_rescoring_finds_picks_that_plain_fp8_misses():
    # Many near-ties: the FP8 argmax often differs from BF16's, the rescored one never (k = 8).
    w, q = head(seed=7)
    x = torch.randn(512, HIDDEN, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    scanned = fp8_logits(x, q)
    best = exact_logits(x, w).argmax(-1)
    plain_misses = int((scanned.argmax(-1) != best).sum())
    out = rescore_top_k(scanned.clone(), x, w, k=8, valid_rows=VOCAB)
    assert plain_misses > 0
    assert torch.equal(out.argmax(-1), best)


def test_padding_rows_never_win():
    padding = 60
    w, q = head(seed=3, vocab=2048 - padding, padding=padding)
    x = torch.randn(16, HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    # Every real logit negative: the zero logits of the padding would win a plain argmax.
    real = slice(0, 2048 - padding)
    w[real] = -w[real].abs()
    x = x.abs()
    q = quantize_per_tensor(w)
    scanned = fp8_logits(x, q)
    assert (scanned.argmax(-1) >= 2048 - padding).all()
    out = rescore_top_k(scanned.clone(), x, w, k=4, valid_rows=2048 - padding)
    assert (out.argmax(-1) < 2048 - padding).all()
    assert torch.equal(out.argmax(-1), exact_logits(x, w)[:, real].argmax(-1))
    assert torch.isneginf(out[:, 2048 - padding :]).all()


def test_a_shard_with_fewer_real_rows_than_k():
    w, q = head(seed=5, vocab=3, padding=61)  # the last TP shard of a barely padded vocab
    x = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    out = rescore_top_k(fp8_logits(x, q), x, w, k=8, valid_rows=3)
    assert torch.equal(out.argmax(-1), exact_logits(x, w)[:, :3].argmax(-1))
    assert torch.equal(out[:, :3], exact_logits(x, w)[:, :3])
    assert torch.isneginf(out[:, 3:]).all()


def test_suppressed_tokens_do_not_take_a_candidates_place():
    w, q = head(seed=11)
    x = torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
    scanned = fp8_logits(x, q)
    suppressed = scanned.topk(2, dim=-1).indices.reshape(-1).unique()
    out = rescore_top_k(scanned.clone(), x, w, k=2, valid_rows=VOCAB, suppressed=suppressed)
    reference = exact_logits(x, w).index_fill(1, suppressed, float("-inf"))
    assert torch.isneginf(out[:, suppressed]).all()
    covered = (scanned.index_fill(1, suppressed, float("-inf")).topk(2, -1).indices
               == reference.argmax(-1)[:, None]).any(-1)  # fmt: skip
    assert (out.argmax(-1)[covered] == reference.argmax(-1)[covered]).all()


def test_rows_are_read_never_written():
    w, q = head(seed=13)
    before = w.clone()
    x = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(13)).to(torch.bfloat16)
    rescore_top_k(fp8_logits(x, q), x, w, k=4, valid_rows=VOCAB)
    assert torch.equal(w, before)


def test_three_dimensional_logits_keep_their_shape():
    w, q = head(seed=17)
    x = torch.randn(2, 3, HIDDEN, generator=torch.Generator().manual_seed(17)).to(torch.bfloat16)
    scanned = fp8_logits(x.reshape(6, HIDDEN), q).reshape(2, 3, VOCAB)
    out = rescore_top_k(scanned, x, w, k=4, valid_rows=VOCAB)
    assert out.shape == (2, 3, VOCAB)


def test_the_record_says_what_each_mode_guarantees():
    assert "may differ" in guarantee(0, "greedy")
    assert "BF16 head's whenever it is among the FP8 top-4" in guarantee(4, "greedy")
    assert "not exactly BF16's" in guarantee(4, "probabilistic")
    # A top-K reader (DFlash2's selector) reads only the K exact values: probabilistic drafting
    # is exact too, once certified; uncertified it says what any rescoring says.
    top = guarantee(4, "probabilistic", certified=True, top_k=8)
    assert "best 8, ids and values, always" in top and "not exactly" not in top
    assert "not exactly BF16's" in guarantee(4, "probabilistic", certified=False, top_k=8)


def test_it_traces_whole_without_a_host_sync():
    # fullgraph=True refuses any graph break, and a host synchronisation (.item(), a data-
    # dependent shape, a Python branch on a tensor) is one: what CUDA-graph capture also forbids.
    w, q = head(seed=19, vocab=2048 - 48, padding=48)
    x = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(19)).to(torch.bfloat16)
    scanned = fp8_logits(x, q)

    def pick(logits, hidden):
        return rescore_top_k(logits, hidden, w, k=4, valid_rows=2048 - 48)

    compiled = torch.compile(pick, fullgraph=True, dynamic=False, backend="aot_eager")
    assert torch.equal(compiled(scanned.clone(), x), pick(scanned.clone(), x))


def test_an_empty_batch_is_served():
    w, q = head(seed=23)
    x = torch.empty(0, HIDDEN, dtype=torch.bfloat16)
    out = rescore_top_k(fp8_logits(x, q), x, w, k=8, valid_rows=VOCAB)
    assert out.shape == (0, VOCAB)


def test_the_rescored_logits_are_the_certified_picks_exact_logits():
    # One way to an exact logit everywhere (certificate-off and certified picks alike): equal rows
    # get equal logits wherever they sit among the candidates.
    from draft_head_fp8.rescore import exact_logits

    g = torch.Generator().manual_seed(0)
    rows = torch.randn(64, 96, generator=g).bfloat16()
    rows[40] = rows[3]
    x = torch.randn(5, 96, generator=g).bfloat16()
    logits = (x.float() @ rows.float().t()).bfloat16()
    out = rescore_top_k(logits.clone(), x, rows, k=64, valid_rows=64)
    assert torch.equal(out, exact_logits(rows, torch.arange(64).expand(5, 64), x))
    assert torch.equal(out[:, 3], out[:, 40])
