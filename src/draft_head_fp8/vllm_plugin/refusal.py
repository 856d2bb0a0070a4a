"""A refused start, or a start slower than it should be, is said once, as one line on stderr,
whatever vLLM's logging does: vLLM logs to stdout by default, and operators look for errors and
warnings on stderr."""

from __future__ import annotations

import sys


def announce_refusal(exc: BaseException) -> None:
    print(f"draft-head-fp8: refusing to start: {exc}", file=sys.stderr, flush=True)


def announce_warning(message: str) -> None:
    print(f"draft-head-fp8: warning: {message}", file=sys.stderr, flush=True)
