"""Certified exact top-K of the draft head, and exact picks after a term added to its logits
(torch only, no vLLM; docs/certificate.md, "Certified top-K" and "A term added after the head").

Drafters that read more than the argmax (DFlash2's candidate selector, DSpark's top-k Markov
path) need the K best reference logits, not only the best. The rule is the certified argmax's,
with the K-th best rescored logit where the argmax has the best: every token outside the rescored
candidates is bounded (``certificate.LogitBound``) strictly below the K-th best, or equal to it
at a higher index; then the K best references are all rescored, and are the rescored candidates'
K best. The same stages: (a) the FP8 top-k, (b) the ``wide_k`` highest upper bounds, (c) every
row of the head, exactly (host sync only).

The order is the reference's: value descending, ties by ascending index, which is the order
``argmax`` (first maximum) and a stable descending sort give. ``torch.topk`` documents no order
among equal values (on a CPU it is ``std::partial_sort``/``nth_element`` over the values alone,
and measured it neither selects nor orders ties by index): a top-K over tied values is defined
here, not copied from one kernel's accident. Without ties among the K + 1 best it is exactly
``torch.topk``'s result.

With ``term`` (DSpark's Markov bias, computed by the caller exactly as vLLM computes it), the
picked values are ``head + term`` in torch's promotion of the two dtypes, the same elementwise
addition vLLM makes (``logits_i + bias``). The certificate bounds the head's part only; each
token's bound is carried through that same addition, so it is compared in the dtype vLLM compares
in (a rounding may merge two values, and the tie rule then decides).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from draft_head_fp8.certificate import LogitBound, every_row
from draft_head_fp8.rescore import exact_logits


class CertifiedTopK(NamedTuple):
    indices: torch.Tensor  # [tokens, top] int64: value descending, ties by ascending index
    values: torch.Tensor  # [tokens, top] the exact (head + term) values, the picked dtype
    counts: torch.Tensor  # [4] int64 by certificate.COUNT_NAMES
    # Stage c's rows (``distinct``): which draft rows, and each one's whole exact row.
    whole_at: torch.Tensor | None = None  # [rows c] int64
    whole: torch.Tensor | None = None  # [rows c, partition], the picked dtype


class _Ranked(NamedTuple):
    candidates: torch.Tensor  # [tokens, m] every candidate so far
    exact: torch.Tensor  # [tokens, m] their exact values (-inf: blocked)
    indices: torch.Tensor  # [tokens, top] the candidates' K best, in the reference's order
    values: torch.Tensor  # [tokens, top]


def ranked(indices: torch.Tensor, values: torch.Tensor, top: int) -> tuple:
    """The ``top`` best of ``values`` (``[tokens, m]``, at token ``indices``), value descending,
    equal values by ascending token index: sorted by index first, then a stable descending sort
    by value, which keeps that order among equals. A token listed twice (stage b may list a
    stage-a candidate again when fewer tokens are left than it asks for) counts once."""
    by_index, order = indices.sort(-1)
    values = values.gather(-1, order)
    again = torch.zeros_like(by_index, dtype=torch.bool)
    again[:, 1:] = by_index[:, 1:] == by_index[:, :-1]
    values = values.masked_fill(again, float("-inf"))
    best = values.sort(dim=-1, descending=True, stable=True)
    return by_index.gather(-1, best.indices[:, :top]), best.values[:, :top]


def largest_at_most(upper: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The largest ``dtype`` value at most ``upper`` (float32; +inf where the rounding overflows).
    A reference logit is a ``dtype`` value, so one at most ``upper`` is at most this, and the
    term is then added to a value of the head's own dtype, as vLLM adds it."""
    if dtype == upper.dtype:
        return upper
    near = upper.to(dtype)  # round to nearest: one step above ``upper`` at most
    above = (near.float() > upper) & ~torch.isinf(near)
    return torch.where(above, torch.nextafter(near, torch.full_like(near, -math.inf)), near)


def beyond(reach: torch.Tensor, kth: torch.Tensor, kth_index: torch.Tensor) -> torch.Tensor:
    """Per draft row: every token's ``reach`` (its value's upper bound, -inf on rescored and
    blocked tokens) is below the K-th best, or equal to it at a higher token index (the reference
    order then puts the token after it), and the K-th best is a real value. NaN never passes."""
    index = torch.arange(reach.shape[-1], device=reach.device)
    kth, kth_index = kth.unsqueeze(-1), kth_index.unsqueeze(-1)
    after = (reach < kth) | ((reach == kth) & (index > kth_index))
    return after.all(-1) & (kth.squeeze(-1) > -math.inf)


def _stage(rows, x, reach, blocked, term, candidates, before, top):
    exact = exact_logits(rows, candidates, x).masked_fill(blocked[candidates], float("-inf"))
    if term is not None:
        exact = exact + term.gather(-1, candidates)  # vLLM's `logits_i + bias`, element by element
    reach.scatter_(-1, candidates, float("-inf"))
    if before is not None:
        candidates = torch.cat([before.candidates, candidates], -1)
        exact = torch.cat([before.exact, exact], -1)
    indices, values = ranked(candidates, exact, top)
    stage = _Ranked(candidates, exact, indices, values)
    return stage, beyond(reach, values[:, -1], indices[:, -1])


def _reach(upper, extra, dtype, term) -> torch.Tensor:
    """Each token's value, bounded above and brought to the picked dtype exactly as vLLM's
    arithmetic brings the reference there: the head's bound ``upper + extra`` rounded up in
    float32, to the largest head-dtype value below it, plus the term in torch's promotion. Both
    roundings are monotone, so a bound before them is a bound after them; a strict inequality
    is not kept by them, which is why ties are decided on the rounded values."""
    bound = upper.add_(extra.unsqueeze(-1))
    # The sum, rounded up; -inf (a rescored or blocked token) stays -inf.
    up = torch.nextafter(bound, torch.full_like(bound, math.inf))
    bound = torch.where(torch.isneginf(bound), bound, up)
    head = largest_at_most(bound, dtype)
    return head + term if term is not None else head


def _fit(logits: torch.Tensor, width: int) -> torch.Tensor:
    """``[tokens, width]``: a head's logits cut to, or padded with ``-inf`` to, the partition."""
    flat = logits.reshape(-1, logits.shape[-1])[:, :width]
    return torch.nn.functional.pad(flat, (0, width - flat.shape[-1]), value=float("-inf"))


@torch.no_grad()
def _stage_c(
    rows: torch.Tensor, x: torch.Tensor, blocked: torch.Tensor, term: torch.Tensor | None,
    rest: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, top: int,
    own: Callable[[], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The rows no stage proved, answered from every row of the head, exactly (host sync):
    ``every_row``'s sums, or ``own``, the call's logits as the head's own BF16 path gives them."""
    left = rest.nonzero().squeeze(-1)
    if own is None:
        whole = every_row(rows, x[left], blocked, rows.dtype)
    else:
        whole = _fit(own(), blocked.numel())[left].to(rows.dtype)
        whole = whole.masked_fill(blocked, float("-inf"))
    if term is not None:
        whole = whole + term[left]
    every = torch.arange(whole.shape[-1], device=whole.device).expand(left.numel(), -1)
    indices, values = indices.clone(), values.clone()
    indices[left], values[left] = ranked(every, whole, top)
    return indices, values, left, whole


def certified_top_k(
    logits: torch.Tensor,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    *,
    top: int,
    k: int,
    wide_k: int,
    valid_rows: int,
    bound: LogitBound,
    suppressed: torch.Tensor | None = None,
    term: torch.Tensor | None = None,
    terms: torch.Tensor | None = None,
    host_sync: bool = True,
    totals: torch.Tensor | None = None,
    distinct: bool | str = False,
    own: Callable[[], torch.Tensor] | None = None,
) -> CertifiedTopK:
    """The ``top`` best reference values of every draft row (head + ``term`` when given), in the
    reference's order, proven per row; ``top = 1`` is the greedy draft (the first maximum).
    ``logits``: the FP8 head's ``[..., partition]`` (not modified); ``rows``: the BF16 rows;
    ``term``: ``[..., partition]``, added as vLLM adds it; ``k >= top`` FP8 candidates at stage
    a, ``wide_k`` more at stage b; ``terms``: the bound's of the whole head call (default: x's).
    ``host_sync=False``: no device read, no stage c, a row left by stage b served from its
    candidates, ``uncertified``. Padding and ``suppressed`` are never picked. ``distinct``: rows
    whose ``top`` best tie (``"last"``: last two) go to stage c too, whose whole rows are
    returned, ``own()``'s (the call's logits by the head's own BF16 path) if given."""
    if not 1 <= top <= min(k, valid_rows):
        raise ValueError(f"need 1 <= top <= k and top <= valid_rows, got {top}, {k}, {valid_rows}")
    flat, x = logits.reshape(-1, logits.shape[-1]), hidden.reshape(-1, hidden.shape[-1])
    partition = flat.shape[-1]
    term = None if term is None else term.reshape(-1, partition)
    blocked = _blocked(partition, valid_rows, suppressed, flat.device)
    masked = flat.float().masked_fill(blocked, float("-inf"))  # the caller's logits untouched
    extra = bound.extra(masked.amax(-1))
    # Stage a's candidates: the FP8 top-k of what is picked, the term included (in float32:
    # only a choice of candidates, and one that a rounding of the sum does not tie).
    scan = masked + term.float() if term is not None else masked
    candidates = scan.topk(min(k, partition), dim=-1).indices
    terms = bound.terms(x) if terms is None else terms.reshape(-1, 2)  # scaled_mm: the call's
    upper = masked.addmm_(terms, bound.rows, beta=1 - bound.rounding_slope)
    reach = _reach(upper, extra, rows.dtype, term).float()
    a, a_certified = _stage(rows, x, reach, blocked, term, candidates, None, top)
    wide = min(wide_k, partition)
    if (host_sync and bool(a_certified.all())) or wide == 0:
        served, b_certified = a, torch.zeros_like(a_certified)
    else:
        widest = reach.topk(wide, dim=-1).indices  # stage a's candidates are -inf in reach
        served, certified = _stage(rows, x, reach, blocked, term, widest, a, top)
        b_certified = certified & ~a_certified
    untied = _untied(served.values, distinct)  # a tie torch.topk may settle its own way
    a_certified, b_certified = a_certified & untied, b_certified & untied
    rest = ~(a_certified | b_certified)
    found = (served.indices, served.values, None, None)
    if host_sync and bool(rest.any()):
        found = _stage_c(rows, x, blocked, term, rest, served.indices, served.values, top, own)
    indices, values, whole_at, whole = found
    counts = _counts(a_certified, b_certified, rest, host_sync, totals)
    shape = (*logits.shape[:-1], top)
    return CertifiedTopK(indices.reshape(shape), values.reshape(shape), counts, whole_at, whole)


def _untied(values: torch.Tensor, distinct: bool | str) -> torch.Tensor:
    """Rows whose ranked values are all distinct (``"last"``: whose last two are); every row
    where ties do not matter (``distinct`` False)."""
    if not distinct:
        return torch.ones(values.shape[0], dtype=torch.bool, device=values.device)
    if distinct == "last":
        return values[:, -2] > values[:, -1]
    return (values[:, :-1] > values[:, 1:]).all(-1)


def _blocked(partition, valid_rows, suppressed, device) -> torch.Tensor:
    """Padding and suppressed tokens: never picked."""
    blocked = torch.zeros(partition, dtype=torch.bool, device=device)
    blocked[valid_rows:] = True
    if suppressed is not None and suppressed.numel():
        blocked[suppressed] = True
    return blocked


def _counts(a_certified, b_certified, rest, host_sync, totals) -> torch.Tensor:
    last = [rest.sum(), rest.sum() * 0]  # stage c, or uncertified where it cannot run
    counts = torch.stack([a_certified.sum(), b_certified.sum(), *last[:: 1 if host_sync else -1]])
    if totals is not None:
        totals.add_(counts)
    return counts
