"""Time for the engine core to end its own way on an ordinary stop (SIGINT, SIGTERM), so the
boot's end-of-serving record is written and sealed (``updates._shutdown``).

Why (read in vLLM 0.32 and 0.34, ``v1/engine/utils.py``, ``v1/utils.py:shutdown``): on SIGINT or
SIGTERM the API server calls ``engine_client.shutdown(timeout=shutdown_timeout)``, whose process
manager sends the engine core SIGTERM and then waits ``timeout`` seconds before killing its whole
process tree (SIGKILL). ``shutdown_timeout`` is 0 by default (abort in-flight requests at once),
so the kill follows the SIGTERM within microseconds: the engine core's own handler has set its
shutdown flag and its ``finally`` (``engine_core.shutdown()`` -> executor -> ``worker.shutdown``)
is cut wherever the kill lands. Measured: ``proofs/0001/`` left empty (SIGINT) or holding only
``update.json`` (SIGTERM). vLLM itself widens the same window on ROCm
(``ROCM_ENGINE_PROCESS_SHUTDOWN_TIMEOUT_S``) so teardown is not killed half-way.

What changes, flag on only (``register`` installs it; flag off nothing is installed): the wait
after the SIGTERM gets ``GRACE_S`` more seconds. Requests are still aborted (or drained) exactly
as ``shutdown_timeout`` says (that is decided in the engine core, not here); the process manager
stops waiting as soon as the engine core has exited, so an engine that ends normally ends no
later than before; only one that hangs is killed ``GRACE_S`` later.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.vllm_plugin import seams

GRACE_S = 30.0  # the engine core's teardown, workers' included (vLLM: 5 s + 4 s per worker)
DEFAULT_S = 5.0  # what vllm.v1.utils.shutdown waits where it is given no timeout


def with_grace(original: Any) -> Any:
    """vLLM's timeout function, ``GRACE_S`` added to what it returns."""

    def timeout_with_grace(*args: Any, **kwargs: Any) -> float:
        timeout = original(*args, **kwargs)
        return (DEFAULT_S if timeout is None else float(timeout)) + GRACE_S

    timeout_with_grace.draft_head_fp8_grace = True  # type: ignore[attr-defined]
    timeout_with_grace.__wrapped__ = original  # type: ignore[attr-defined]
    return timeout_with_grace


def install() -> None:
    """In this process (the front end is the one that kills), once."""
    owner, attribute = seams.holder("engine_process_shutdown_timeout")
    original = getattr(owner, attribute)
    if not getattr(original, "draft_head_fp8_grace", False):
        setattr(owner, attribute, with_grace(original))
