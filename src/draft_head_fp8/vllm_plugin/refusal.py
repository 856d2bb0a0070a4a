"""A refused start, or a start slower than it should be, is said once, as one line on stderr,
whatever vLLM's logging does: vLLM logs to stdout by default, and operators look for errors and
warnings on stderr."""

from __future__ import annotations

import sys
from typing import Any

from draft_head_fp8.evidence.exact_pick import guarantee


def announce_refusal(exc: BaseException) -> None:
    print(f"draft-head-fp8: refusing to start: {exc}", file=sys.stderr, flush=True)


def announce_refused_call(call: str, exc: BaseException) -> None:
    """A call refused on a running engine, which goes on serving what its receipt proves."""
    print(f"draft-head-fp8: refusing {call}: {exc}", file=sys.stderr, flush=True)


def announce_warning(message: str) -> None:
    print(f"draft-head-fp8: warning: {message}", file=sys.stderr, flush=True)


def announce_choices(method: Any, plan: Any) -> None:
    """On stderr, what makes this head slower or less exact than it could be."""
    if method.kernel is not None and method.kernel.warning:
        announce_warning(method.kernel.warning)
    top_k = getattr(method, "top_k", None)
    if plan.draft_sample_method != "greedy" and not (top_k is not None and method.certified):
        # Exact picks are exact draft tokens only when the draft token is an argmax, or when the
        # drafter reads nothing but the head's exact top-K (top_k_rows).
        announce_warning(guarantee(method.rescore_k, plan.draft_sample_method, method.certified))


def refusing_class(name: str, base: type, reason: str, module: str) -> type:
    """A subclass of vLLM's ``base`` whose construction refuses with ``reason``, before anything
    is built: vLLM's registry inspects what it always inspects (the class's interfaces), and the
    engine stops with the reason on stderr."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        from draft_head_fp8.errors import HeadFp8EligibilityError

        exc = HeadFp8EligibilityError(reason)
        announce_refusal(exc)
        raise exc

    cls = type(name, (base,), {"__init__": refuse, "refusal": reason, "__module__": module})
    cls.__qualname__ = name
    return cls
