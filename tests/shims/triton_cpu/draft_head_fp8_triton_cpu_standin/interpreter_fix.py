"""One correction to Triton 3.9.0's interpreter, where it contradicts compiled Triton: a
comparison's result carries its operands' type (``x >= 0`` on an int64 is typed int64 around
bool data), so splatting it to a block (``block_mask & scalar_mask``) fills the block with
int64 0/1, the ``&`` then stores int32, and ``tl.load`` refuses the mask ("mask has unsupported
dtype"). Compiled Triton types every comparison ``i1``. vLLM 0.34's DFlash2 selector walk
(``_selector_walk_kernel``: ``mask & valid``) stops there with the flag off. The correction keeps
a splat of bool data bool, typed ``int1``; no value changes: a splat of a truth value is that
truth value in every lane, as compiled Triton computes it."""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder

MODULE = "triton.runtime.interpreter"


class AfterLoad(MetaPathFinder):
    """Finds the interpreter's module as Python would, and applies the correction right after
    the module has run (then leaves ``sys.meta_path``)."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            apply()

        spec.loader.exec_module = exec_module
        return spec


def apply() -> bool:
    """Correct the interpreter's splat of a truth value; False where the interpreter is not
    the one this was written against (nothing changed)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    splat = getattr(builder, "create_splat", None)
    if splat is None or getattr(splat, "corrected", False):
        return splat is not None

    def create_splat(self, ret_ty, arg):
        if arg.data.dtype != np.bool_:
            return splat(self, ret_ty, arg)
        value = arg.data.reshape(-1)[0]
        return interpreter.TensorHandle(np.full(ret_ty.shape, value, dtype=np.bool_), tl.int1)

    create_splat.corrected = True
    builder.create_splat = create_splat
    return True
