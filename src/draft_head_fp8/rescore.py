"""Exact draft tokens from an FP8 head: scan the vocabulary with the FP8 logits, then recompute
the top-k candidates exactly from the head's own BF16 rows (torch only, no vLLM).

vLLM drafts greedily by default: the draft token is the argmax of the draft logits, so only the
pick matters. The FP8 scan costs half the bytes of a BF16 head; the k exact dot products cost
``k x hidden x 2`` bytes per row (16 KiB at hidden 1024 with the default k = 8). What comes back:

- each candidate's logit is the BF16 head's logit (float32 accumulation rounded to the logits'
  dtype, as vLLM's BF16 GEMMs do);
- every other logit is clamped strictly below the smallest rescored candidate (one pass), so no
  FP8 value can outrank the candidates: the argmax is the BF16 argmax whenever that token is among
  the FP8 top-k;
- the vocab padding of a ``ParallelLMHead`` shard is -inf and never a candidate.

Static shapes and no host synchronisation: it runs inside CUDA graphs and under torch.compile, at
any batch size. With tensor parallelism each rank rescores its own shard: the global BF16 argmax
lies in one shard, where it is in that rank's top-k, and every other rank's logits are either
exact candidates (never above it) or clamped below its own candidates.

``certificate.certified_pick`` builds on the same pieces (``mask_unreal``, ``exact_logits``,
``serve``) and proves, row by row, that the BF16 argmax was among the candidates.
"""

from __future__ import annotations

import torch


def mask_unreal(flat: torch.Tensor, valid_rows: int, suppressed: torch.Tensor | None) -> None:
    """-inf, in place, on the vocab padding and on the tokens the drafter masks out afterwards:
    neither may take a candidate's place."""
    if valid_rows < flat.shape[-1]:
        flat[:, valid_rows:] = float("-inf")
    if suppressed is not None and suppressed.numel():
        flat.index_fill_(1, suppressed, float("-inf"))


def exact_logits(rows: torch.Tensor, candidates: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``[tokens, m]`` logits of the candidate rows, rounded to the rows' dtype, each one the same
    function of its row and ``x`` wherever the row sits: a float32 product (exact for BF16 inputs)
    summed over the contiguous hidden dimension, whose summation order depends on ``hidden`` only
    (torch's CPU reduction below its 32768-element grain). A batched GEMM's order depends on the
    batch's shape, so equal rows could round apart and a tie could break the wrong way."""
    picked = rows[candidates].float()  # [tokens, m, hidden]
    return (picked * x.float().unsqueeze(-2)).sum(-1).to(rows.dtype)


def serve(
    flat: torch.Tensor, candidates: torch.Tensor, exact: torch.Tensor, invalid: torch.Tensor
) -> torch.Tensor:
    """Candidates carry ``exact``; every other logit is clamped strictly below the smallest valid
    candidate, so a clamped FP8 logit can neither beat nor tie one. ``invalid`` candidates
    (padding, suppressed: only when a shard has fewer real tokens than candidates) stay -inf."""
    exact = exact.to(flat.dtype).masked_fill(invalid, float("-inf"))
    floor = exact.masked_fill(invalid, float("inf")).amin(-1, keepdim=True)
    ceiling = torch.nextafter(floor, torch.full_like(floor, float("-inf")))
    torch.minimum(flat, ceiling, out=flat)
    flat.scatter_(-1, candidates, exact)
    return flat


@torch.no_grad()  # logits, never a graph: vLLM serves in inference mode anyway
def rescore_top_k(
    logits: torch.Tensor,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    *,
    k: int,
    valid_rows: int,
    suppressed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rescore ``logits`` (``[..., partition]``, from the FP8 head) and return them (in place
    when they are contiguous, as kernels return them).

    ``hidden``: the ``[tokens, hidden]`` activations the head was applied to; ``rows``: the BF16
    ``[partition, hidden]`` rows of the same head; ``valid_rows``: how many leading columns are
    real tokens (the rest is vocab padding); ``suppressed``: local token indices the drafter
    masks out afterwards (they must not take a candidate's place).
    """
    flat = logits.reshape(-1, logits.shape[-1])
    x = hidden.reshape(-1, hidden.shape[-1])
    mask_unreal(flat, valid_rows, suppressed)
    candidates = flat.topk(min(k, flat.shape[-1]), dim=-1).indices  # [tokens, k]
    # The candidates' BF16 rows (the only bytes read twice), exactly as the certified pick reads
    # them: one way to an exact logit everywhere, so equal rows tie wherever they sit.
    exact = exact_logits(rows, candidates, x)
    serve(flat, candidates, exact, candidates >= valid_rows)
    return flat.view(logits.shape)
