"""What vLLM's source says a drafter's model files run that this vLLM build has no kernel for,
read with ``ast`` (nothing imported from them): each ``torch.ops._C.<op>`` a model file calls,
directly or through a wrapper of vLLM's ``_custom_ops`` (``ops.<wrapper>(...)``), asked of the
operators the build's compiled kernels register (``seams``: ``kernel_ops``). A fact beside
``build_facts``: whatever else happens as vLLM builds the class, it stops at the first call of
an operator the build lacks (at start-up, or at the first draft step).

The files read are those of the drafter's class, its vLLM bases and the model classes it builds
(``build_facts.built``): where a vLLM model keeps the kernels of its layers. vLLM 0.34's CPU
kernels have none of its CUDA-only fused ones (MiniMax M3's ``fused_minimax_m3_qknorm_rope_kv_
insert``, DeepSeek V4's ``fused_deepseek_v4_kv_rope_insert``: both absent from ``torch.ops._C``
with the composed CPU engine's kernels loaded).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache

from draft_head_fp8.vllm_plugin import build_facts, class_source
from draft_head_fp8.vllm_plugin.class_source import ClassRef

NAMESPACE = "_C"  # where vLLM registers its compiled operators (as kernels.py reads them)


@cache
def _seam() -> tuple[str, str]:
    """(vLLM's module of Python wrappers of its compiled operators, the namespace the operators
    are registered in), where ``seams`` keeps them for the installed release."""
    from draft_head_fp8.vllm_plugin import seams

    try:
        release = seams.installed_release()
    except Exception:  # no vLLM here: the first release's, never read
        release = seams.RELEASES[0]
    module, _, namespaces = seams.BY_NAME["kernel_ops"].location(release).partition(":")
    return module, f"{namespaces}.{NAMESPACE}"


def _kernel_op(node: ast.AST) -> str | None:
    """``X`` where ``node`` is ``X`` of the compiled operators' namespace."""
    if not isinstance(node, ast.Attribute):
        return None
    return node.attr if ast.unparse(node.value) == _seam()[1] else None


@cache
def _wrapped_ops() -> dict[str, tuple[str, ...]]:
    """Each function of vLLM's ``_custom_ops`` -> the compiled operators it calls."""
    module = class_source.read_module(_seam()[0])
    if module is None:
        return {}
    found = {}
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef):
            ops = (_kernel_op(n) for n in ast.walk(node))
            found[node.name] = tuple(dict.fromkeys(op for op in ops if op))
    return found


def _aliases_of_custom_ops(module: class_source.Module) -> set[str]:
    """The names a model file binds vLLM's ``_custom_ops`` to (``from vllm import
    _custom_ops as ops``)."""
    bound = {
        name
        for name, sources in module.imports.items()
        if any(f"{where}.{original}" == _seam()[0] for where, original in sources)
    }
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname for a in node.names if a.name == _seam()[0] and a.asname}
    return bound


def _unguarded(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node a function's body runs whatever its inputs: nothing under an ``if``, a
    ``while`` or a conditional expression (a platform's or a size's branch), in a handler, or in
    a nested function."""
    for statement in body:
        if isinstance(statement, (ast.If, ast.While, ast.FunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(statement, (ast.For, ast.With, ast.Try)):
            yield from _unguarded(statement.body)
            continue
        branches = {
            id(inner)
            for node in ast.walk(statement)
            if isinstance(node, ast.IfExp)
            for inner in ast.walk(node)
        }
        yield from (node for node in ast.walk(statement) if id(node) not in branches)


def _run_functions(module: class_source.Module) -> Iterator[ast.FunctionDef]:
    """The methods of the model file's classes, and its functions that the file calls or hands
    on (``op_func=...``, to vLLM's custom-op registry): what its forward can reach."""
    used = {n.id for n in ast.walk(module.tree) if isinstance(n, ast.Name)}
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef):
            yield from (f for f in node.body if isinstance(f, ast.FunctionDef))
        elif isinstance(node, ast.FunctionDef) and node.name in used:
            yield node


def called_ops(module_name: str) -> Iterator[tuple[str, str]]:
    """(the call as written, the compiled operator it runs) for each one the model file calls
    unconditionally in a function its forward can reach."""
    module = class_source.read_module(module_name)
    if module is None:
        return
    aliases = _aliases_of_custom_ops(module)
    for function in _run_functions(module):
        for node in _unguarded(function.body):
            if not isinstance(node, ast.Call):
                continue
            op = _kernel_op(node.func)
            if op is not None:
                yield f"{_seam()[1]}.{op} (in {function.name})", op
            elif isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in aliases:
                for inner in _wrapped_ops().get(node.func.attr, ()):
                    yield f"{ast.unparse(node.func)} (in {function.name})", inner


@cache
def registered(op: str) -> bool | None:
    """Whether this vLLM build's compiled kernels register ``op``; None where they cannot be
    loaded here (no fact)."""
    try:
        from draft_head_fp8.vllm_plugin import seams

        return hasattr(getattr(seams.read("kernel_ops"), NAMESPACE), op)
    except Exception:
        return None


def _model_files(chain: tuple[ClassRef, ...]) -> list[str]:
    refs = [*chain, *build_facts.built(chain)]
    return list(dict.fromkeys(ref.module for ref in refs))


def kernel_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why vLLM cannot run the chain's class with this build's kernels, and what would; None
    where its model files call no operator the build lacks."""
    for module_name in _model_files(chain):
        for call, op in called_ops(module_name):
            if registered(op) is False:
                return (
                    f"{module_name}, one of its model files, calls {call} unconditionally, and "
                    f"this vLLM build's compiled kernels register no {_seam()[1]}.{op}: vLLM "
                    "stops at its first call; it needs a vLLM build with that kernel, as vLLM's "
                    "CUDA build has"
                )
    return None
