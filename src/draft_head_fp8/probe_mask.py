"""The probe's check of a drafter that masks a vocabulary suffix after its head (Nemotron 3.5
Transcribe's MTP: every token from ``speechlm_output_vocab_size`` on is set to -inf): the probe
watches the head's logits before vLLM's mask, so the BF16 head's pick it compares with is the
argmax over the drafted tokens only. Beside it, how often the mask decided: rows whose BF16 argmax
over the whole head is a masked token (``masked_bf16_argmax``; the same flag off and on), and,
flag on, rows whose plain FP8 argmax is one (``masked_fp8_argmax``: a pick that saw the masked
tokens would have drafted nothing vLLM lets through there).
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.probe_block import plain_fp8_argmax


def drafted_tokens(family: Any, config: Any, vocab: int) -> int:
    """How many of the ``vocab`` first tokens vLLM's drafter may draft (all, with no mask)."""
    return family.masked_tokens(config, vocab).start


def count_masked(stats: dict, expected: Any, drafted: int, head: Any, hidden: Any) -> None:
    """Add one head call's rows: ``expected`` the BF16 head's logits over the whole head."""
    vocab = expected.shape[-1]
    stats.setdefault("masked_bf16_argmax", 0)
    stats.setdefault("masked_fp8_argmax", 0)
    stats["masked_bf16_argmax"] += int((expected.argmax(-1) >= drafted).sum())
    plain = plain_fp8_argmax(head, hidden, vocab)
    if plain is not None:
        stats["masked_fp8_argmax"] += int((plain >= drafted).sum())
