"""The probe's check of a drafter that reads the head's top-K (DFlash2's candidate selector):
vLLM's ``compute_candidates`` takes ``torch.topk(K)`` of the head's logits over every request x
position of the block (``LogitsProcessor.get_top_k_tokens``), the scale and soft cap applied to
the K values only, and everything the drafter drafts after it is a function of those ids and
values. So each row is checked there: its ids AND values equal ``torch.topk(K)`` of the BF16
head's logits recomputed from the checkpoint (``worker_probe.bf16_reference``), transformed as
vLLM transforms them. Beside it, per call: rows where the plain FP8 logits' top-K (vLLM's FP8
kernel alone, the certified rows left out) would have held other ids or another order
(``fp8_top_k_differs``; flag off the head is BF16: 0), and rows whose K + 1 best BF16 values
tie (``top_k_tied``: where ``torch.topk``'s own choice decides, and the head hands the row
whole). The rows also count per position of the block (``probe_block.count_block``) by their
first candidate, with the plain FP8 argmax beside it.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8 import probe_block


def _as_vllm(values: Any, processor: Any) -> Any:
    """The K values as ``get_top_k_tokens`` returns them: float32, scaled, then soft-capped."""
    import torch

    values = values.float()
    scale = getattr(processor, "scale", 1.0)
    soft_cap = getattr(processor, "soft_cap", None)
    if scale != 1.0:
        values = values * scale
    if soft_cap is not None:
        values = torch.tanh(values / soft_cap) * soft_cap
    return values


def _plain_top_k(head: Any, hidden: Any, vocab: int, top: int) -> Any:
    """The plain FP8 logits' top-K ids (vLLM's FP8 kernel alone), or None where the head is not
    this package's FP8 head at tensor parallel 1."""
    method = getattr(head, "quant_method", None)
    kernel = getattr(method, "fp8_linear", None)
    if kernel is None or hasattr(kernel, "pick") or getattr(head, "tp_size", 1) != 1:
        return None
    return kernel.apply_weights(head, hidden, None)[..., :vocab].topk(top, dim=-1).indices.cpu()


def watch_candidates(drafter: Any, steps: int, raw_reference: Any, stats: dict) -> None:
    """Wrap ``drafter.compute_candidates`` (an instance attribute: this probe only) to check and
    count every row it returns; ``raw_reference(hidden, dtype)``: the BF16 head's logits, no
    scale or soft cap."""
    import torch

    served = type(drafter).compute_candidates.__get__(drafter)  # not an earlier probe's wrap
    processor = drafter.candidate_logits_processor
    top = int(drafter.model.candidate_selector.top_k)
    counted = stats.setdefault(
        "candidates", {"rows": 0, "agree": 0, "fp8_top_k_differs": 0, "top_k_tied": 0, "top": top}
    )

    def checked(hidden_states: Any) -> Any:
        ids, values = served(hidden_states)
        vocab = int(processor.org_vocab_size)
        expected = raw_reference(hidden_states, hidden_states.dtype)[..., :vocab]
        # K as vLLM asks it: torch.topk's order among equal values depends on K itself.
        want = torch.topk(expected, top, dim=-1)
        want_ids, want_values = want.indices, _as_vllm(want.values, processor)
        same = (ids.cpu() == want_ids).all(-1) & (values.cpu() == want_values).all(-1)
        best = torch.topk(expected, min(top + 1, vocab), dim=-1).values
        tied = (best[:, :-1] <= best[:, 1:]).any(-1)
        plain = _plain_top_k(drafter.lm_head, hidden_states, vocab, top)
        counted["rows"] += int(same.numel())
        counted["agree"] += int(same.sum())
        counted["top_k_tied"] += int(tied.sum())
        if plain is not None:
            counted["fp8_top_k_differs"] += int((plain != want_ids).any(-1).sum())
        stats["steps"] += int(same.numel())
        stats["agree"] += int(same.sum())
        first = None if plain is None else plain[:, 0]
        probe_block.count_block(stats, steps, same, want_ids[:, 0], first)
        return ids, values

    drafter.compute_candidates = checked
