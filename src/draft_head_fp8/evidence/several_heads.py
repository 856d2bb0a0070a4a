"""Several heads per drafter (docs/contract.md, "Several heads"): a drafter that keeps a head of
its own in each draft layer and picks one per draft step (Step3p5MTP) serves every one of them in
FP8, so the receipt proves every one, and says which is which.

The receipt's top-level keys describe the first head, as for a drafter with one head (a reader
that knows nothing of ``heads`` reads a true receipt of it); ``heads`` then lists every head, the
first included, in draft-step order, each with its own receipt (the same capture, of that head
alone: v2/v3 at start-up, v4 after a weight update) and its own exact pick's facts (what that
head's pick rescores from). Head ``i`` of ``n`` serves the draft steps ``s`` with
``s mod n == i``. Validation reads each entry as it reads a receipt, fail-closed: one head that
is not proven fails the whole receipt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.exact_pick import validate_pick
from draft_head_fp8.families.family import Modules

HEADS = "heads"
ENTRY_KEYS = ("path", "tensor", "draft_step", "draft_steps_of", "receipt", "exact_pick")


def one_head(modules: Modules, path: str) -> Modules:
    """``modules`` with the head at ``path`` as the one draft head: what its own receipt reads."""
    found = [(p, m) for p, m in modules.draft_heads if p == path]
    if not found:
        raise HeadFp8EligibilityError(f"the drafter has no head at {path}: nothing proves it")
    return replace(modules, draft_heads=tuple(found))


def entry(
    *, path: str, tensor: str, step: int, steps_of: int, receipt: dict, pick: dict
) -> dict:  # fmt: skip
    return {
        "path": path,
        "tensor": tensor,
        "draft_step": step,
        "draft_steps_of": steps_of,
        "receipt": receipt,
        "exact_pick": pick,
    }


def capture(
    modules: Modules,
    heads: Sequence[tuple[str, str]],
    receipt_of: Callable[[Modules, str], dict],
    pick_of: Callable[[Modules], dict],
) -> list[dict]:
    """Every head's entry: ``heads`` (path, checkpoint tensor) in draft-step order, each head's
    receipt (``receipt_of(its modules, its path)``) and exact pick (``pick_of``) read alone."""
    entries = []
    for step, (path, tensor) in enumerate(heads):
        one = one_head(modules, path)
        entries.append(
            entry(path=path, tensor=tensor, step=step, steps_of=len(heads),
                  receipt=receipt_of(one, path), pick=pick_of(one))
        )  # fmt: skip
    return entries


def with_heads(first: dict, entries: Sequence[dict]) -> dict:
    """The receipt of a drafter with several heads: the first head's, and every head's."""
    return {**first, HEADS: [dict(item, receipt=dict(item["receipt"])) for item in entries]}


def _entry_failure(i: int, item: Any, count: int, verdict: Callable[[Any], str | None]) -> str:
    if not isinstance(item, Mapping) or set(item) != set(ENTRY_KEYS):
        return f"heads[{i}] is not a head entry ({', '.join(ENTRY_KEYS)})"
    if item["draft_step"] != i or item["draft_steps_of"] != count:
        return f"heads[{i}] says draft step {item['draft_step']} of {item['draft_steps_of']}"
    receipt = item["receipt"]
    if isinstance(receipt, Mapping) and HEADS in receipt:
        return f"heads[{i}]'s receipt lists heads of its own"
    if not isinstance(receipt, Mapping) or receipt.get("prefix") != item["path"]:
        return f"heads[{i}]'s receipt is not of the head at {item['path']}"
    failure = verdict(receipt)
    if failure is not None:
        return f"head {item['path']} ({item['tensor']}): {failure}"
    try:
        validate_pick(item["exact_pick"])
    except HeadFp8EligibilityError as exc:
        return f"head {item['path']} ({item['tensor']}): {exc}"
    return ""


def failure(document: Any, verdict: Callable[[Any], str | None]) -> str | None:
    """None where ``document`` lists no heads, or proves every head it lists; else the first
    reason it does not. ``verdict``: what a receipt of one head must pass (``receipt_verdict``)."""
    if not isinstance(document, Mapping) or HEADS not in document:
        return None
    heads = document[HEADS]
    if not isinstance(heads, list) or len(heads) < 2:
        return "heads must list two or more heads (a drafter with one head lists none)"
    for i, item in enumerate(heads):
        reason = _entry_failure(i, item, len(heads), verdict)
        if reason:
            return reason
    paths = [item["path"] for item in heads]
    if len(set(paths)) != len(paths):
        return f"heads lists one head twice ({', '.join(paths)})"
    if document.get("prefix") != paths[0]:
        return f"the receipt's head ({document.get('prefix')}) is not its first head ({paths[0]})"
    return None
