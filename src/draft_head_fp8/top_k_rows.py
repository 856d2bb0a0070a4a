"""What the FP8 head hands a drafter that reads the head's top-K (torch only, no vLLM;
docs/certificate.md, "Serving a top-K").

DFlash2's candidate selector (``LogitsProcessor.get_top_k_tokens``) and DSpark's top-k path
(``dspark_draft_topk``) run ``torch.topk(K)`` on the head's logits. Where the K + 1 best BF16
values of a row are all distinct, ``torch.topk`` of any row holding those K values and nothing
as large has one answer, set and order, whatever its rule among equals: the row is handed
``-inf`` but at the certified K best, each exactly valued. Where two of them tie, which of them
``torch.topk`` returns, and in what order, depends on the whole row (``std::partial_sort`` or
``nth_element`` over values alone on a CPU): the row is handed whole, every logit exact (the
certificate's stage c), so that ``torch.topk`` sees the row it would see with the flag off and
settles the tie as it would there. Either way vLLM's own ``topk`` then returns the BF16 head's
ids and values, bit for bit, and ``argmax`` of such a row is the greedy draft too. A drafter that
reads only the set (``set_only``) needs a whole row only where the K-th and (K+1)-th tie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from draft_head_fp8.certificate_topk import certified_top_k


@torch.no_grad()
def top_k_rows(
    method: Any,
    logits: torch.Tensor,
    hidden: torch.Tensor,
    top: int,
    *,
    terms: torch.Tensor | None = None,
    wide_k: int,
    set_only: bool = False,
    whole: Callable[[], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``logits``' shape: per row the certified ``top`` best BF16 values and ``-inf`` elsewhere,
    or the whole exact row where the ``top + 1`` best tie (``method``: the head's, with its rows,
    bound and counts; ``terms``: the bound's activation terms of the whole head call).
    ``set_only``: the drafter reads the set of the ``top`` best, never ``torch.topk``'s order
    (DSpark scatters them back into a row by token id): only a tie between the ``top``-th and
    the next can change what it reads, and only such rows are handed whole. ``whole``: the
    call's logits as vLLM's own BF16 head computes them (the rows handed whole are taken from it;
    by default the certificate's stage c, float32 sums)."""
    padded = method.rescore_rows.shape[0]
    scan = logits
    if logits.shape[-1] < padded:
        scan = torch.nn.functional.pad(logits, (0, padded - logits.shape[-1]), value=float("-inf"))
    # One more than the drafter reads: the K-th best must be strictly above every other token.
    upto = min(top + 1, method.real_rows)
    capturing = hidden.is_cuda and torch.cuda.is_current_stream_capturing()
    best = certified_top_k(
        scan, hidden, method.rescore_rows, top=upto, k=max(upto, method.rescore_k),
        wide_k=max(wide_k, upto), valid_rows=method.real_rows, bound=method.bound,
        suppressed=method.suppressed, terms=terms, host_sync=not capturing,
        totals=method.pick_counts, distinct="last" if set_only else True, own=whole,
    )  # fmt: skip
    width = logits.shape[-1]
    served = torch.full_like(logits, float("-inf")).view(-1, width)
    indices = best.indices.reshape(-1, upto)[:, :top]
    values = best.values.reshape(-1, upto)[:, :top].to(logits.dtype)
    served.scatter_(-1, indices, values)
    if best.whole_at is not None:  # the tied rows, and any no bound proved: whole and exact
        served[best.whole_at] = best.whole[:, :width].to(logits.dtype)
    return served.view_as(logits)
