"""The exact pick of a drafter that adds a Markov term to its head's logits (DSpark), made where
vLLM adds it: a mixin before the family's drafter class (``drafter.drafter_class``, for a
family whose record names a ``term``).

vLLM 0.34's ``DSparkSpeculator`` (Model Runner V2) drafts a block per step: the head's logits of
every request and position at once (the drafter's ``compute_draft_logits``), then position by
position the term from the token drafted just before (``markov_bias``), ``logits_i + bias``,
``greedy_argmax``, and the drafter's ``map_draft_to_target`` on the ids. The head method serves
plain FP8 logits for such a family (``picks_after_term``); this mixin keeps the block
(``term_pick.Block``), takes each position's term as vLLM computed it, and hands vLLM's
``map_draft_to_target`` the certified pick over ``BF16 head + term`` instead of the FP8 argmax.
Where the BF16 rows served the head call (``batch_paths``), vLLM's own argmax is already exact
and stays. The three are methods of the drafter itself, which vLLM's loop calls by name (the
seams table lists them, ``TERM_PICK_METHODS``).

Refused at construction, with the reason: tensor parallelism (vLLM's sharded and gathered
sequential paths), drafting other than greedy (the term is then added inside the Gumbel
kernel, and only the argmax is what the certificate makes exact), the certificate off, and
adaptive verification without the drafter's confidence head (vLLM's acceptance estimator reads
the FP8 logits).
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8 import settings
from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.term_pick import Block
from draft_head_fp8.vllm_plugin import certified_pick


def refusal(vllm_config: Any, draft_config: Any) -> str | None:
    """Why the pick after the term cannot be proven for this engine, else None."""
    speculative = vllm_config.speculative_config
    sample = str(getattr(speculative, "draft_sample_method", "greedy") or "greedy")
    if vllm_config.parallel_config.tensor_parallel_size != 1:
        return (
            "a drafter that adds a Markov term to its head's logits is served at tensor parallel "
            "1 only: vLLM's DSpark gathers or re-shards the logits before it adds the term, which "
            "no engine test here has proven"
        )
    if sample != "greedy":
        return (
            f"{sample} drafting adds the Markov term inside vLLM's sampling kernel: only the "
            "greedy pick after the term is made exact; serve it greedy, or with the flag unset"
        )
    if not settings.certify() or settings.exact_pick_top_k() == 0:
        return (
            "the pick after the Markov term is served only certified: unset "
            f"{settings.CERTIFY_ENV} and {settings.RESCORE_ENV}"
        )
    adaptive = getattr(speculative, "enable_adaptive_verification", False)
    if adaptive and not getattr(draft_config, "enable_confidence_head", False):
        return (
            "adaptive verification without the drafter's confidence head estimates acceptance "
            "from the draft logits, which are FP8 here: serve it without adaptive verification"
        )
    return None


class MarkovTermPick:
    """Mixed in before ``DraftHeadFp8Drafter``: the pick after the term, one block at a time."""

    def _prepare(self, vllm_config: Any) -> None:
        reason = refusal(vllm_config, self.config)
        if reason is not None:
            raise HeadFp8EligibilityError(reason)
        self._term_steps = int(vllm_config.speculative_config.num_speculative_tokens)
        # vLLM's DSpark config sets it on the draft's config from the speculative option or the
        # checkpoint (dspark/config.py): its speculator then takes the head's top-k alone.
        top = getattr(self.config, "dspark_draft_topk", None)
        self._term_top_k = None if top is None else int(top)
        self._term_block: Block | None = None
        super()._prepare(vllm_config)

    def _fp8_head_method(self) -> Any:
        method = getattr(self.lm_head, "quant_method", None)
        return method if getattr(method, "picks_after_term", False) else None

    def compute_draft_logits(self, hidden_states: Any) -> Any:
        logits = super().compute_draft_logits(hidden_states)
        method = self._fp8_head_method()
        if method is None:
            raise HeadFp8EligibilityError(
                "the draft head is not the private FP8 head that serves plain logits for the pick "
                "after the Markov term: nothing would make that pick exact"
            )
        self._term_block = None
        if method.serves_bf16_rows(hidden_states):
            return logits  # the BF16 rows served: vLLM's own picks are the reference's
        terms = method.bound.terms(hidden_states)  # the head call's activation scale
        if self._term_top_k is not None:
            # vLLM's top-k path takes the head's top-k alone (torch.topk), adds the term to those
            # only, scatters them into a -inf row by token id and drafts its argmax (the first
            # maximum by token id): it reads the set, never topk's order, so only a tie at the
            # k-th place needs the whole row (map_draft_to_target passes the pick on).
            return certified_pick.top_k(
                method, logits, hidden_states, self._term_top_k, terms=terms, set_only=True
            )
        self._term_block = Block(hidden_states, logits, self._term_steps, terms)
        return logits

    def markov_bias(self, markov_embed: Any) -> Any:
        term = super().markov_bias(markov_embed)
        if self._term_block is not None:
            self._term_block.take_term(term)
        return term

    def map_draft_to_target(self, draft_ids: Any) -> Any:
        if self._term_block is not None:
            picks = self._term_block.pick(self._fp8_head_method(), settings.WIDE_RESCORE_TOPK)
            draft_ids = picks.to(draft_ids.dtype).view_as(draft_ids)
        return super().map_draft_to_target(draft_ids)
