"""Certified exact draft tokens (docs/certificate.md) on real tensors: the bound holds for every
token against the W8A16 emulation, vLLM's CPU op (where this machine has it) and the
``_scaled_mm`` path; every pick is the reference argmax with the lowest index among ties, on
random, outlier, tiny-tailed, near-duplicate, tied, padded, suppressed and tensor-parallel heads; a
weakened bound is caught; the counts add up; and with no host sync the pick never waits for the
device."""

from __future__ import annotations

import contextlib
import functools

import pytest

torch = pytest.importorskip("torch")
from engine_support import assert_this_kind_has_no_w8a16_op  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench import heads  # noqa: E402
from draft_head_fp8 import certificate as cert  # noqa: E402
from draft_head_fp8.certificate import (  # noqa: E402
    KERNEL_SCALED_MM,
    KERNEL_W8A16,
    KERNELS,
    OP_EXPONENT_ZERO_MAX,
    STAGE_A,
    STAGE_B,
    STAGE_C,
    UNCERTIFIED,
    certified_pick,
    logit_bound,
    logit_error_bound,
    row_error_norms,
)
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.machine import this_machine  # noqa: E402
from draft_head_fp8.rescore import exact_logits  # noqa: E402

PROPERTY = settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
HIDDENS = (32, 64, 128)  # vLLM's CPU op packs multiples of 32
KINDS = ("random", "outliers", "tiny tail", "cluster", "padding", "suppressed")


@functools.cache
def w8a16_op():
    """vLLM's CPU W8A16 op through the plugin's own call, or None where this machine lacks it."""
    if not this_machine().has_w8a16_op:
        return None
    try:
        import vllm._custom_ops  # noqa: F401  registers torch.ops._C

        from draft_head_fp8.vllm_plugin.kernels import packed_w8a16
    except Exception:
        return None
    return packed_w8a16 if hasattr(torch.ops._C, "fp8_scaled_mm_cpu") else None


# ------------------------------------------------------------------------------------------
# Heads and hidden states
# ------------------------------------------------------------------------------------------


def make_head(kind: str, seed: int, vocab: int, hidden: int, tokens: int, *, peak: bool = False):
    """(bf16 rows ``[vocab, hidden]``, hidden states ``[tokens, hidden]``, valid rows,
    suppressed token indices or None) for one kind of adversarial head; ``peak``: each hidden
    state leans hard toward one real row (a confident draft)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, hidden, generator=gen) * 0.05
    x = torch.randn(tokens, hidden, generator=gen) * 2
    valid, suppressed = vocab, None
    if kind == "outliers":  # a per-tensor scale set by a few rows 10-1000x the rest
        w[torch.randint(0, vocab, (4,), generator=gen)] *= 10.0 ** int(
            torch.randint(1, 4, (), generator=gen)
        )
    elif kind == "tiny tail":  # many rows that are mostly FP8 subnormals and zeros
        tail = torch.randperm(vocab, generator=gen)[: vocab // 2]
        w[tail] *= 10.0 ** -torch.randint(2, 6, (tail.numel(), 1), generator=gen).float()
    elif kind == "cluster":  # 24 near-duplicates, closer than the FP8 step, at the top
        base = int(torch.randint(0, vocab, (), generator=gen))
        at = torch.randperm(vocab, generator=gen)[:24]
        w[at] = w[base] * (1 + 1e-2 * torch.randn(24, hidden, generator=gen))
        # Their logit ~8 standard deviations of the others' (0.05 ||x||): the top of the row.
        x = x + w[base] / w[base].norm() ** 2 * (8 * 0.05 * x.norm(dim=-1, keepdim=True))
    elif kind == "padding":  # the last rows are vLLM's zero padding of the shard
        valid = vocab - int(torch.randint(1, vocab // 4, (), generator=gen))
        w[valid:] = 0
        w[:valid] = -w[:valid].abs()
        x = x.abs()  # every real logit negative: padding zeros would win a plain argmax
    elif kind == "suppressed":  # masked tokens with the largest FP8 logits of all
        w = torch.cat([w[:-4], (x.mean(0) / x.mean(0).norm()).expand(4, hidden)])
        suppressed = torch.arange(vocab - 4, vocab)
    if peak:
        rows = w[torch.randint(0, valid - 4, (tokens,), generator=gen)]
        x = x + rows / rows.norm(dim=-1, keepdim=True) ** 2 * (x.norm(dim=-1, keepdim=True) * 2)
    return w.to(torch.bfloat16), x.to(torch.bfloat16), valid, suppressed


def blocked_mask(vocab: int, valid: int, suppressed) -> torch.Tensor:
    blocked = torch.arange(vocab) >= valid
    if suppressed is not None:
        blocked[suppressed] = True
    return blocked


def reference(w: torch.Tensor, x: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """Every token's reference logit, the arithmetic the pick rescores with."""
    every = torch.arange(w.shape[0]).expand(x.shape[0], -1)
    return exact_logits(w, every, x).masked_fill(blocked, float("-inf"))


def fp8_logits(kernel: str, x, q, *, real_op: bool = False) -> torch.Tensor:
    """The FP8 head's logits: W8A16 emulated in float32 (``bench.heads.fp8_w8a16``) or through
    vLLM's op; ``_scaled_mm`` emulated (``bench.heads.fp8_emulated``: vLLM's per-call dynamic
    activation quantization) or through the real ``torch._scaled_mm``."""
    if kernel == KERNEL_W8A16:
        return (
            w8a16_op()(q.weight, q.scale)(x) if real_op else heads.fp8_w8a16(x, q.weight, q.scale)
        )
    if real_op:
        return heads.fp8_scaled_mm(x, q.weight, q.scale)
    return heads.fp8_emulated(x, q.weight, q.scale)


def bound_for(w, q, kernel, **weaken):
    return logit_bound(
        row_error_norms(w, q, kernel=kernel), hidden=w.shape[1], kernel=kernel, **weaken
    )


def assert_bound_holds(f, r, bound_values, blocked):
    error = (f.double() - r.double()).abs()[:, ~blocked]
    assert (error <= bound_values.double()[:, ~blocked]).all(), float(
        (error / bound_values.double()[:, ~blocked]).max()
    )


# ------------------------------------------------------------------------------------------
# (i) the bound holds for every token
# ------------------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=15)
@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31 - 1),
    vocab=st.sampled_from([64, 256, 1024]),
    hidden=st.sampled_from(HIDDENS),
    tokens=st.integers(1, 6),
)
def test_the_bound_holds_for_every_token(kind, seed, vocab, hidden, tokens):
    w, x, valid, suppressed = make_head(kind, seed, vocab, hidden, tokens)
    q = quantize_per_tensor(w)
    blocked = blocked_mask(vocab, valid, suppressed)
    r = reference(w, x, blocked)
    # Another summation order of the same reference: the bound covers any order.
    r_mm = (x.float() @ w.float().t()).to(torch.bfloat16).masked_fill(blocked, float("-inf"))
    for kernel in KERNELS:
        bound = bound_for(w, q, kernel)
        for real_op in (False, True):
            if real_op and kernel == KERNEL_W8A16 and w8a16_op() is None:
                continue
            f = fp8_logits(kernel, x, q, real_op=real_op)
            values = logit_error_bound(f, x, bound)
            assert_bound_holds(f, r, values, blocked)
            assert_bound_holds(f, r_mm, values, blocked)


def test_row_errors_cover_the_weights_the_op_multiplies_by():
    op = w8a16_op()
    if op is None:
        return assert_this_kind_has_no_w8a16_op()
    w, _, _, _ = make_head("tiny tail", 3, 256, 64, 1)
    q = quantize_per_tensor(w)
    # x = e_j reads column j of the weights the op uses (exact: one BF16 product, no sum).
    effective = op(q.weight, q.scale)(torch.eye(64, dtype=torch.bfloat16)).float().t()
    deviation = (w.float() - effective).norm(dim=-1)
    errors = row_error_norms(w, q)
    assert (deviation <= errors.error).all()
    # ... and the exponent-0 bytes are why: an exact decoding would not be the op's.
    assert not torch.equal(effective, (q.weight.float() * q.scale).to(torch.bfloat16).float())


def test_the_op_reads_exponent_zero_bytes_as_the_bound_assumes():
    op = w8a16_op()
    if op is None:
        return assert_this_kind_has_no_w8a16_op()
    raw = torch.arange(256, dtype=torch.uint8)
    raw = raw[(raw & 0x7F) != 0x7F]  # no NaN
    values = raw.view(torch.float8_e4m3fn)
    pad = torch.zeros(-values.numel() % 32, dtype=torch.float8_e4m3fn)
    weight = torch.cat([values, pad]).reshape(-1, 1).expand(-1, 32).contiguous()
    read = op(weight, torch.ones(1))(torch.eye(32, dtype=torch.bfloat16)).float()[0, : raw.numel()]
    exponent_zero = (raw & 0x78) == 0
    assert torch.equal(read[~exponent_zero], values.float()[~exponent_zero])
    assert (read[exponent_zero].abs() <= OP_EXPONENT_ZERO_MAX).all()


# ------------------------------------------------------------------------------------------
# (ii) every pick is the reference argmax, lowest index among ties
# ------------------------------------------------------------------------------------------


def check_pick(w, x, valid, suppressed, kernel, *, k=8, wide_k=64, real_op=False):
    q = quantize_per_tensor(w)
    blocked = blocked_mask(w.shape[0], valid, suppressed)
    r = reference(w, x, blocked)
    f = fp8_logits(kernel, x, q, real_op=real_op)
    out = certified_pick(
        f.clone(), x, w, k=k, wide_k=wide_k, valid_rows=valid,
        bound=bound_for(w, q, kernel), suppressed=suppressed,
    )  # fmt: skip
    pick = out.logits.argmax(-1)  # vLLM's greedy draft: the first maximum
    assert torch.equal(pick, r.argmax(-1))
    assert torch.equal(out.logits.float().amax(-1), r.float().amax(-1))
    assert torch.isneginf(out.logits[:, blocked]).all()
    assert int(out.counts.sum()) == x.shape[0] and int(out.counts[UNCERTIFIED]) == 0
    return out


@PROPERTY
@given(
    kind=st.sampled_from(KINDS),
    kernel=st.sampled_from(KERNELS),
    seed=st.integers(0, 2**31 - 1),
    vocab=st.sampled_from([64, 512, 2048]),
    hidden=st.sampled_from(HIDDENS),
    tokens=st.integers(1, 6),
    k=st.sampled_from([1, 2, 8]),
    wide_k=st.sampled_from([0, 16, 64]),
)
def test_every_pick_is_the_reference_argmax(kind, kernel, seed, vocab, hidden, tokens, k, wide_k):
    w, x, valid, suppressed = make_head(kind, seed, vocab, hidden, tokens)
    check_pick(w, x, valid, suppressed, kernel, k=k, wide_k=wide_k)


@pytest.mark.parametrize("seed", range(3))
def test_every_pick_through_the_real_op(seed):
    if w8a16_op() is None:
        return assert_this_kind_has_no_w8a16_op()
    for kind in KINDS:
        w, x, valid, suppressed = make_head(kind, seed, 512, 64, 4)
        check_pick(w, x, valid, suppressed, KERNEL_W8A16, real_op=True)


GRID = 2.0**-8  # the weight scale of the hand-built heads: amax 1.75 = 448 * 2^-8


def hand_head(special: dict[int, list[float]], vocab: int = 64, hidden: int = 64):
    """Rows exactly as written (``special``: index -> values, repeated to ``hidden``), the rest
    small; row 0 holds the amax 1.75 so that the FP8 scale is exactly 2^-8, with a logit far
    below everything. Activations all 1: every sum below is exact in float32."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(vocab, hidden, generator=gen) * 0.05
    w[0] = -1.0
    w[0, 0] = 1.75
    for index, values in special.items():
        w[index] = torch.tensor(values)
    x = torch.ones(1, hidden, dtype=torch.bfloat16)
    return w.to(torch.bfloat16), x


def test_a_bf16_tie_across_the_candidate_boundary_goes_to_the_lowest_index():
    # Row 5: on the FP8 grid, 64.5 exactly. Row 3: 64.2578125 in float32, which rounds to 64.5 in
    # BF16 (a tie with row 5), while its FP8 copy sums to 64.25 and rounds (to even) to 64.0.
    low, high = 3, 5
    w, x = hand_head({low: [1.0] * 63 + [1.2578125], high: [1.0] * 63 + [1.5]})
    q = quantize_per_tensor(w)
    assert float(q.scale) == GRID
    f, r = heads.fp8_w8a16(x, q.weight, q.scale), reference(w, x, torch.zeros(64, dtype=bool))
    assert (float(f[0, low]), float(f[0, high]), float(r[0, low]), float(r[0, high])) == (
        64.0, 64.5, 64.5, 64.5,
    )  # fmt: skip
    assert int(f.topk(1).indices) == high  # the FP8 top-1 leaves the lowest index out
    out = check_pick(w, x, 64, None, KERNEL_W8A16, k=1, wide_k=8)
    assert int(out.counts[STAGE_A]) == 0 and int(out.counts[STAGE_B]) == 1


# ------------------------------------------------------------------------------------------
# (iii) a weakened bound is caught: the tests above can fail
# ------------------------------------------------------------------------------------------


def weakened_pick(w, x, q, **weaken):
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    return certified_pick(
        f.clone(), x, w, k=1, wide_k=8, valid_rows=w.shape[0],
        bound=bound_for(w, q, KERNEL_W8A16, **weaken),
    )  # fmt: skip


@pytest.mark.parametrize("weaken", [{"scale": 0.5}, {"rounding": False}])
def test_a_weakened_bound_certifies_a_wrong_tie(weaken):
    w, x = hand_head({3: [1.0] * 63 + [1.2578125], 5: [1.0] * 63 + [1.5]})
    q = quantize_per_tensor(w)
    wrong = weakened_pick(w, x, q, **weaken)
    assert int(wrong.counts[STAGE_A]) == 1  # certified at once ...
    assert int(wrong.logits.argmax(-1)) == 5  # ... on the tie's higher index: wrong
    right = weakened_pick(w, x, q)
    assert int(right.counts[STAGE_A]) == 0 and int(right.logits.argmax(-1)) == 3


def test_half_the_bound_certifies_a_wrong_token():
    # Row 7: every weight 1.046875 (67.0 in all), each quantized down to 1.0: its FP8 logit is
    # 64.0, 3.0 below its own, the FP8 error aligned with x (Cauchy-Schwarz is tight). Row 9: on
    # the grid, 66.5: the FP8 top-1, below row 7.
    w, x = hand_head({7: [1.046875] * 64, 9: [1.0] * 59 + [1.5] * 5})
    q = quantize_per_tensor(w)
    f, r = heads.fp8_w8a16(x, q.weight, q.scale), reference(w, x, torch.zeros(64, dtype=bool))
    assert (float(f[0, 7]), float(r[0, 7]), float(f[0, 9]), float(r[0, 9])) == (
        64.0, 67.0, 66.5, 66.5,
    )  # fmt: skip
    wrong = weakened_pick(w, x, q, scale=0.5)
    assert int(wrong.counts[STAGE_A]) == 1 and int(wrong.logits.argmax(-1)) == 9
    right = weakened_pick(w, x, q)
    assert int(right.counts[STAGE_A]) == 0 and int(right.logits.argmax(-1)) == 7


# ------------------------------------------------------------------------------------------
# (iv) the counts
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", KERNELS)
def test_counts_add_up_and_clusters_need_more_than_the_top_k(kernel):
    totals = torch.zeros(4, dtype=torch.int64)
    stages = []
    for seed in range(4):
        w, x, valid, _ = make_head("cluster", seed, 2048, 64, 8)
        q = quantize_per_tensor(w)
        f = fp8_logits(kernel, x, q)
        out = certified_pick(
            f, x, w, k=8, wide_k=64, valid_rows=valid, bound=bound_for(w, q, kernel),
            totals=totals,
        )  # fmt: skip
        assert int(out.counts.sum()) == 8
        stages.append(out.counts)
    assert torch.equal(totals, torch.stack(stages).sum(0))
    assert int(totals.sum()) == 32 and int(totals[UNCERTIFIED]) == 0
    assert int(totals[STAGE_B] + totals[STAGE_C]) > 0  # 24 rows within the FP8 error of the best
    assert cert.count_record(totals) == dict(zip(cert.COUNT_NAMES, totals.tolist()))


def test_stage_c_is_the_reference_itself():
    # No wider stage and one candidate: some rows are served from every row of the head.
    w, x, valid, suppressed = make_head("suppressed", 1, 1024, 64, 6)
    q = quantize_per_tensor(w)
    f = heads.fp8_w8a16(x, q.weight, q.scale)
    out = certified_pick(
        f, x, w, k=1, wide_k=0, valid_rows=valid, bound=bound_for(w, q, KERNEL_W8A16),
        suppressed=suppressed,
    )  # fmt: skip
    served = int(out.counts[STAGE_C])
    assert served > 0 and int(out.counts[STAGE_A]) + served == 6
    # Those rows are the reference, bit for bit (a certified row has clamped values in it).
    r = reference(w, x, blocked_mask(1024, valid, suppressed))
    assert int((out.logits == r).all(-1).sum()) == served


@pytest.mark.parametrize("kind", ["padding", "suppressed"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_padding_and_suppressed_tokens_never_block(kind, kernel):
    # The same call with the masked tokens' FP8 logits far above everything: the same pick, the
    # same counts (confident rows certify without every row), and they come back -inf.
    w, x, valid, suppressed = make_head(kind, 7, 1024, 64, 4, peak=True)
    q = quantize_per_tensor(w)
    blocked = blocked_mask(1024, valid, suppressed)
    quiet = fp8_logits(kernel, x, q)
    loud = quiet.clone()
    loud[:, blocked] = quiet.float().abs().max() * 100
    bound = bound_for(w, q, kernel)
    outs = [
        certified_pick(
            f, x, w, k=8, wide_k=64, valid_rows=valid, bound=bound, suppressed=suppressed
        )
        for f in (quiet, loud)
    ]
    assert torch.equal(outs[0].logits, outs[1].logits)
    assert torch.equal(outs[0].counts, outs[1].counts)
    assert int(outs[0].counts[STAGE_A] + outs[0].counts[STAGE_B]) == 4  # certified, no full rows
    assert torch.isneginf(outs[1].logits[:, blocked]).all()
    assert torch.equal(outs[1].logits.argmax(-1), reference(w, x, blocked).argmax(-1))


# ------------------------------------------------------------------------------------------
# Tensor parallelism: per-shard certificates compose
# ------------------------------------------------------------------------------------------


def two_shards(w, x, tie: bool) -> tuple:
    """A 1000-row head as vLLM splits it over two ranks (512 rows each, padded to 64: rank 1
    holds 24 padding rows), one per-tensor scale for the whole head; with ``tie``, the global
    best duplicated into the other shard (the lower rank's copy must win). The reference pick,
    and each shard's (rows, real rows, FP8 copy)."""
    vocab, hidden = w.shape
    if tie:
        best = int(reference(w, x[:1], torch.zeros(vocab, dtype=bool)).argmax())
        w[(best + 512) % vocab] = w[best]
    want = reference(w, x, torch.zeros(vocab, dtype=bool)).argmax(-1)
    amax = float(w.float().abs().max())
    shards = []
    for start in (0, 512):
        real = min(vocab, start + 512) - start
        rows = torch.zeros(512, hidden, dtype=torch.bfloat16)
        rows[:real] = w[start : start + real]
        shards.append((rows, real, quantize_per_tensor(rows, amax=amax, real_rows=real)))
    return want, shards


@PROPERTY
@given(
    kind=st.sampled_from(("random", "outliers", "cluster")),
    kernel=st.sampled_from(KERNELS),
    seed=st.integers(0, 2**31 - 1),
    tie=st.booleans(),
)
def test_two_shards_compose_to_the_global_pick(kind, kernel, seed, tie):
    vocab, hidden, padded = 1000, 64, 1024
    w, x, _, _ = make_head(kind, seed, vocab, hidden, 5)
    want, shards = two_shards(w, x, tie)
    gathered = []
    for rows, real, q in shards:
        f = fp8_logits(kernel, x, q)
        out = certified_pick(
            f, x, rows, k=8, wide_k=64, valid_rows=real, bound=bound_for(rows, q, kernel)
        )
        gathered.append(out.logits)
    logits = torch.cat(gathered, -1)[:, :vocab]  # vLLM's all-gather, padding dropped
    assert logits.shape[-1] == vocab and padded == 1024
    assert torch.equal(logits.argmax(-1), want)


# ------------------------------------------------------------------------------------------
# (v) no host synchronisation when none is allowed
# ------------------------------------------------------------------------------------------


def stage_b_pick(f, x, w, bound, k, wide_k):
    """Stage b's pick, rebuilt from the bound's public pieces: the FP8 top-k and the ``wide_k``
    other tokens of highest upper bound, rescored; the lowest index among their best."""
    candidates = f.topk(k, -1).indices
    upper = f.float().addmm_(bound.terms(x), bound.rows)  # the pick's own arithmetic
    upper.scatter_(-1, candidates, float("-inf"))
    union = torch.cat([candidates, upper.topk(wide_k, -1).indices], -1)
    exact = exact_logits(w, union, x)
    best = exact == exact.amax(-1, keepdim=True)
    return torch.where(best, union, w.shape[0]).amin(-1)


class HostSync(RuntimeError):
    pass


@contextlib.contextmanager
def no_host_reads():
    """Inside, any read of a tensor's value by the host raises: what CUDA-graph capture forbids."""

    def refuse(*args, **kwargs):
        raise HostSync("the host read a tensor")

    with pytest.MonkeyPatch.context() as patch:
        for name in ("__bool__", "item", "tolist", "nonzero", "__int__", "__float__", "__index__"):
            patch.setattr(torch.Tensor, name, refuse)
        yield


def cluster_call(seed=2, tokens=8):
    w, x, valid, _ = make_head("cluster", seed, 2048, 64, tokens)
    q = quantize_per_tensor(w)
    return w, x, q, heads.fp8_w8a16(x, q.weight, q.scale), bound_for(w, q, KERNEL_W8A16)


def test_no_sync_reads_nothing_and_serves_stage_b():
    w, x, q, f, bound = cluster_call()
    pick = functools.partial(certified_pick, k=2, wide_k=16, valid_rows=2048, bound=bound)
    with no_host_reads():
        out = pick(f.clone(), x, w, host_sync=False)
        with pytest.raises(HostSync):  # the guard works: eager mode reads the device
            pick(f.clone(), x, w)
    assert int(out.counts[STAGE_C]) == 0 and int(out.counts.sum()) == 8
    assert int(out.counts[UNCERTIFIED]) > 0  # k = 2, wide 16: some rows stay uncertified
    assert torch.equal(out.logits.argmax(-1), stage_b_pick(f, x, w, bound, 2, 16))


def test_no_sync_compiles_whole():
    # fullgraph=True refuses any graph break; a host read, a data-dependent shape or a Python
    # branch on a tensor is one.
    w, x, q, f, bound = cluster_call(seed=3, tokens=5)

    def pick(logits, hidden):
        return certified_pick(
            logits, hidden, w, k=4, wide_k=16, valid_rows=2048 - 48, bound=bound, host_sync=False
        )

    compiled = torch.compile(pick, fullgraph=True, dynamic=False, backend="aot_eager")
    got, want = compiled(f.clone(), x), pick(f.clone(), x)
    assert torch.equal(got.logits, want.logits) and torch.equal(got.counts, want.counts)
    assert int(want.counts[STAGE_C]) == 0


def test_the_counts_in_no_sync_mode_match_eager_where_certified():
    w, x, q, f, bound = cluster_call(seed=4)
    eager = certified_pick(f.clone(), x, w, k=2, wide_k=16, valid_rows=2048, bound=bound)
    graph = certified_pick(
        f.clone(), x, w, k=2, wide_k=16, valid_rows=2048, bound=bound, host_sync=False
    )
    assert torch.equal(eager.counts[:2], graph.counts[:2])
    assert int(eager.counts[STAGE_C]) == int(graph.counts[UNCERTIFIED])


def test_the_kernel_must_match_the_row_errors():
    w, _, _, _ = make_head("random", 0, 64, 32, 1)
    errors = row_error_norms(w, quantize_per_tensor(w), kernel=KERNEL_SCALED_MM)
    with pytest.raises(ValueError, match="made for 'scaled_mm'"):
        logit_bound(errors, hidden=32, kernel=KERNEL_W8A16)
    with pytest.raises(ValueError, match="kernel must be one of"):
        row_error_norms(w, quantize_per_tensor(w), kernel="marlin")


def test_row_errors_stream_in_chunks(monkeypatch):
    w, _, _, _ = make_head("outliers", 5, 300, 64, 1)
    q = quantize_per_tensor(w)
    whole = row_error_norms(w, q)
    monkeypatch.setattr(cert, "CHUNK_ELEMENTS", 64 * 7)  # 7 rows a chunk, a ragged end
    pieces = row_error_norms(w, q)
    assert torch.equal(whole.error, pieces.error) and torch.equal(whole.norm, pieces.norm)
    assert (whole.norm >= w.float().norm(dim=-1)).all()
