"""The probe's check of a drafter that adds a term to its head's logits before it picks (DSpark):
every draft token vLLM hands on is ``argmax(BF16 head + term)``, the head's logits recomputed
from the checkpoint's own tensor (``worker_probe.bf16_reference``), the term vLLM's own.

At the drafter's logits processor both heads pass: the draft head's call (one block: requests x
positions, ordered (request, position)) gives the reference logits; the term head's
(``markov_w2``) gives each position's term. vLLM's ``map_draft_to_target`` receives each
position's ids: there they are compared, then the position moves on. Flag off this checks the
reference itself (vLLM's BF16 pick); flag on, the plugin's pick after the term, and how often
the argmax of the logits the head served (plain FP8 there) plus the term would have drafted
another token (``fp8_argmax_differs``: what the pick after the term corrected).
"""

from __future__ import annotations

from typing import Any


def watch_term_agreement(drafter: Any, steps: int, reference: Any, stats: dict) -> Any:
    """Count, in ``stats``, each draft token against ``argmax(reference + term)`` (vLLM's
    argmax: the first maximum), ``steps`` positions per block; returns the forward hook to
    register on the drafter's logits processor."""
    term_head = drafter.model.markov_head.markov_w2
    block: dict = {"reference": None, "served": None, "step": 0, "term": None}

    def compare(module: Any, args: tuple, kwargs: dict, logits: Any) -> None:
        head = args[0] if args else kwargs["lm_head"]
        if head is term_head:
            block["term"] = logits.cpu()
            return
        hidden = args[1] if len(args) > 1 else kwargs["hidden_states"]
        expected = reference(hidden, logits.dtype)
        block["reference"] = expected.view(-1, steps, expected.shape[-1])
        # A copy: vLLM's top-k path fills the logits it was handed with -inf, in place.
        block["served"] = logits.detach().clone().cpu().view(-1, steps, logits.shape[-1])
        block["step"] = 0

    top = getattr(drafter.config, "dspark_draft_topk", None)
    if top is not None:
        _watch_top_k(drafter, int(top), block, stats)
    served = drafter.map_draft_to_target

    def checked(draft_ids: Any) -> Any:
        ids = served(draft_ids)
        step, term = block["step"], block["term"]
        expected = block["reference"][:, step]
        if top is not None:  # the top-k path: its picks made where vLLM adds the term
            picked, served_pick = block.pop("top_k_picks")
            vocab = expected.shape[-1]
        else:
            vocab = min(expected.shape[-1], term.shape[-1])
            picked = (expected[..., :vocab] + term[..., :vocab]).argmax(-1)
            served_pick = (block["served"][:, step, :vocab] + term[..., :vocab]).argmax(-1)
        # Where the term decided the pick: the head's argmax alone would have drafted another.
        moved = int((picked != expected[..., :vocab].argmax(-1)).sum())
        stats["term_moved"] = stats.get("term_moved", 0) + moved
        differs = int((served_pick != picked).sum())
        stats["fp8_argmax_differs"] = stats.get("fp8_argmax_differs", 0) + differs
        d2t = getattr(drafter, "draft_id_to_target_id", None)
        if d2t is not None:
            picked = picked + d2t.cpu()[picked]
        same = ids.cpu().view(-1) == picked.view(-1)
        stats["steps"] += int(same.numel())
        stats["agree"] += int(same.sum())
        stats["after_term"] = stats.get("after_term", 0) + int(same.numel())
        block["step"] = step + 1
        return ids

    drafter.map_draft_to_target = checked  # an instance attribute: this process's probe only
    return compare


def _watch_top_k(drafter: Any, top: int, block: dict, stats: dict) -> None:
    """DSpark's top-k path adds the term only to the head's ``top`` best and drafts among them
    (``apply_markov_bias_gathered``, vLLM's own, into a ``-inf`` row). The reference: the same
    call on the BF16 head's logits, their top-k taken as vLLM takes it (``torch.topk``, whose
    choice among equal values is its own); the served head's plain FP8 logits the same way: what
    the plain FP8 head would have drafted. ``top_k_tied`` counts the rows whose ``top + 1`` best
    BF16 values tie, ``top_k_set_tied`` those where the ``top``-th and the next do: there the set
    is ``torch.topk``'s to choose (``top_k_rows`` hands those rows whole)."""
    import torch

    gathered = drafter.apply_markov_bias_gathered

    def pick(markov_embed: Any, logits: Any) -> Any:
        index = logits.topk(top, dim=-1).indices
        dense = torch.full_like(logits, float("-inf"))
        gathered(markov_embed, dense, logits.gather(-1, index), index)
        return dense.argmax(-1).cpu()  # vLLM's greedy argmax: the first maximum

    def checked(markov_embed: Any, logits: Any, values: Any, index: Any) -> Any:
        step = block["step"]
        expected = block["reference"][:, step].to(logits.device, logits.dtype)
        served = block["served"][:, step].to(logits.device, logits.dtype)
        best = expected.topk(min(top + 1, expected.shape[-1]), dim=-1).values
        tied = int((best[:, :-1] <= best[:, 1:]).any(-1).sum())
        stats["top_k_tied"] = stats.get("top_k_tied", 0) + tied
        at_kth = int((best[:, -2] <= best[:, -1]).sum())  # the set itself is topk's to choose
        stats["top_k_set_tied"] = stats.get("top_k_set_tied", 0) + at_kth
        block["top_k_picks"] = (pick(markov_embed, expected), pick(markov_embed, served))
        return gathered(markov_embed, logits, values, index)

    drafter.apply_markov_bias_gathered = checked  # an instance attribute: this probe only
