"""The exact pick after a term vLLM adds to the head's logits, step by step through one draft
block (torch only, no vLLM; docs/certificate.md, "A term added after the head", and
docs/architecture.md, "A pick after a term").

DSpark's speculator computes the head's logits for a whole block once (``[requests x steps,
vocab]``), then, step by step, a Markov term from the token drafted just before, adds it
(``logits_i + bias``) and picks ``argmax``. The head alone cannot know a later step's term, so
the pick is made where the term exists: ``Block`` keeps the block's FP8 logits and hidden states
(and the certificate's per-row activation terms, computed over the whole head call as the
kernel quantized it), takes each step's term as vLLM computes it, and answers that step's pick:
the certified pick over ``BF16 head + term`` (``certificate_topk.certified_top_k``, ``top=1``).

It relies on the order vLLM's loop calls in (the block's logits, then per step the term, then
the pick); any other order, a step past the block, or a term of another shape raises
``TermOrderError``: a pick is never made from the wrong step's numbers.
"""

from __future__ import annotations

from typing import Any

import torch

from draft_head_fp8.certificate_topk import certified_top_k
from draft_head_fp8.errors import HeadFp8EligibilityError


class TermOrderError(HeadFp8EligibilityError):
    """vLLM's loop did not call in the order the pick after the term relies on."""


def pick_after_term(
    method: Any,
    logits: torch.Tensor,
    hidden: torch.Tensor,
    term: torch.Tensor,
    *,
    terms: torch.Tensor | None = None,
    wide_k: int,
) -> torch.Tensor:
    """``[rows]`` int64: per row, the first maximum of ``BF16 head + term`` (vLLM's own addition,
    in torch's promotion of the two dtypes), certified with ``method``'s bound, counted in its
    counts. ``logits``: the FP8 head's ``[rows, vocab]`` (vLLM's logits processor may have cut
    the padding: it is put back as -inf, never picked); ``terms``: the bound's activation terms
    of these rows, made over the whole head call (else from ``hidden``)."""
    padded = method.rescore_rows.shape[0]
    if logits.shape[-1] < padded:
        cut = padded - logits.shape[-1]
        logits = torch.nn.functional.pad(logits, (0, cut), value=float("-inf"))
        term = torch.nn.functional.pad(term, (0, cut), value=0.0)
    capturing = hidden.is_cuda and torch.cuda.is_current_stream_capturing()
    return certified_top_k(
        logits, hidden, method.rescore_rows, top=1, k=method.rescore_k, wide_k=wide_k,
        valid_rows=method.real_rows, bound=method.bound, suppressed=method.suppressed,
        term=term, terms=terms, host_sync=not capturing, totals=method.pick_counts,
    ).indices[..., 0]  # fmt: skip


class Block:
    """One draft step's block: the head's logits and hidden states of ``requests x steps`` rows,
    ordered (request, step) as vLLM lays them out, answered one step at a time."""

    def __init__(
        self, hidden: torch.Tensor, logits: torch.Tensor, steps: int, terms: torch.Tensor | None
    ) -> None:
        rows = logits.shape[0]
        if steps < 1 or rows % steps or hidden.shape[0] != rows:
            raise TermOrderError(
                f"a draft block of {rows} logit rows and {hidden.shape[0]} hidden rows is not "
                f"requests x {steps} steps"
            )
        self.steps = steps
        self.hidden = hidden.view(rows // steps, steps, -1)
        self.logits = logits.view(rows // steps, steps, -1)
        self.terms = None if terms is None else terms.view(rows // steps, steps, -1)
        self.step = 0
        self.term: torch.Tensor | None = None

    def take_term(self, term: torch.Tensor) -> None:
        """The term of the next step, as vLLM computed it."""
        if self.term is not None or self.step >= self.steps:
            raise TermOrderError(
                f"a Markov term for step {self.step} of {self.steps} arrived "
                + ("before the last one was picked" if self.term is not None else "past the block")
            )
        expected = (self.logits.shape[0], self.logits.shape[-1])
        if tuple(term.shape) != expected:
            raise TermOrderError(f"a Markov term of shape {list(term.shape)}, not {list(expected)}")
        self.term = term

    def pick(self, method: Any, wide_k: int) -> torch.Tensor:
        """This step's certified picks, ``[requests]``; the next call is the next step's."""
        if self.term is None:
            raise TermOrderError(f"step {self.step} was picked before its Markov term arrived")
        step, term = self.step, self.term
        self.step, self.term = step + 1, None
        terms = None if self.terms is None else self.terms[:, step]
        return pick_after_term(
            method, self.logits[:, step], self.hidden[:, step], term, terms=terms, wide_k=wide_k
        )
