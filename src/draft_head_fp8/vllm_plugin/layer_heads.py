"""A drafter's heads as the plugin serves them: one, or one per draft layer (``Family.layer_heads``:
Step3p5MTP's ``model.layers[N].shared_head.head``), each with its own FP8 head method, its own
BF16 rows and its own checkpoint tensor. The start-up proof and every later one read them here,
so the receipt lists every head (``evidence.several_heads``) and none goes unproven."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from draft_head_fp8.evidence import several_heads
from draft_head_fp8.evidence.exact_pick import pick_record
from draft_head_fp8.families.family import HeadSource, Modules
from draft_head_fp8.vllm_plugin import shared_head


def heads(plan: Any, drafter: Any) -> tuple[tuple[str, HeadSource], ...]:
    """Every head the drafter serves, by path, with where its bytes come from (``plan.head``'s
    folder and timing, each head's own tensor)."""
    return plan.family.heads_in(getattr(drafter, "config", None), plan.head)


def several(plan: Any) -> bool:
    return plan.family.layer_heads is not None


def head_modules(modules: Modules, plan: Any) -> list[Any]:
    """Every head module the drafter serves (the first alone for a drafter with one head)."""
    if not several(plan):
        return [modules.head]
    return [one.head for one in _each(modules, plan)]


def _each(modules: Modules, plan: Any) -> list[Modules]:
    return [several_heads.one_head(modules, p) for p, _ in heads(plan, modules.drafter)]


def decision_of(drafter: Any, path: str) -> Any:
    return getattr(drafter, "head_decisions", {}).get(path, drafter.head_decision)


def receipt_and_pick(
    modules: Modules, plan: Any, receipt_of: Callable[[Modules, Any], dict]
) -> tuple[dict, dict]:
    """The receipt and the exact pick's facts of the drafter's heads: of its one head; or of its
    first head, with every head's own (``heads``). ``receipt_of(modules, decision)``: one
    head's receipt, as the phase captures it."""
    pick_of = _pick_of(plan)
    if not several(plan):
        return receipt_of(modules, modules.drafter.head_decision), pick_of(modules)
    drafter = modules.drafter
    entries = several_heads.capture(
        modules,
        [(path, source.tensor) for path, source in heads(plan, drafter)],
        lambda one, path: receipt_of(one, decision_of(drafter, path)),
        pick_of,
    )
    # The top-level keys are the first head's receipt, captured once (a later proof remakes
    # each head once).
    return several_heads.with_heads(entries[0]["receipt"], entries), entries[0]["exact_pick"]


def _pick_of(plan: Any) -> Callable[[Modules], dict]:
    def pick(modules: Modules) -> dict:
        return pick_record(
            method=modules.head.quant_method,
            modules=modules,
            draft_sample_method=plan.draft_sample_method,
            rows_source=shared_head.rows_source(plan.head),
        )

    return pick
