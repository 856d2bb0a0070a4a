"""Test-only stand-in for the triton-cpu fork's ``"cpu"`` backend: not a backend. It compiles
nothing and launches nothing; every kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``).
Why it exists and what it cannot show: ``tests/shims/triton_cpu/README.md``."""

SHIM = "draft-head-fp8's test-only Triton 'cpu' stand-in (tests/shims/triton_cpu)"


def refuse(what: str) -> RuntimeError:
    return RuntimeError(
        f"{SHIM} cannot {what}: it compiles nothing; run with TRITON_INTERPRET=1 so that Triton's "
        "interpreter runs every kernel"
    )
