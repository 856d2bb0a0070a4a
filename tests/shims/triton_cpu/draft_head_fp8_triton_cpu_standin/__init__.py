"""Test-only stand-in for the triton-cpu fork's ``"cpu"`` backend: not a backend. It compiles
nothing and launches nothing; every kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``).
Why it exists and what it cannot show: ``tests/shims/triton_cpu/README.md``."""

SHIM = "draft-head-fp8's test-only Triton 'cpu' stand-in (tests/shims/triton_cpu)"


def refuse(what: str) -> RuntimeError:
    return RuntimeError(
        f"{SHIM} cannot {what}: it compiles nothing; run with TRITON_INTERPRET=1 so that Triton's "
        "interpreter runs every kernel"
    )


def _correct_the_interpreter() -> None:
    """Where every kernel runs in Triton's interpreter, correct its one known contradiction of
    compiled Triton that a tested vLLM kernel meets (``interpreter_fix.py``), once the
    interpreter's module has loaded: Triton discovers this backend while it imports itself,
    before its language module can be imported."""
    import os
    import sys

    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from draft_head_fp8_triton_cpu_standin import interpreter_fix

    if interpreter_fix.MODULE in sys.modules:
        interpreter_fix.apply()
    else:
        sys.meta_path.insert(0, interpreter_fix.AfterLoad())
