"""What vLLM's own source says an MTP drafter's target runs that this vLLM build has no kernel
for, read with ``ast`` (nothing imported from the model files). An MTP layer drafts beside its
target, from the target's checkpoint and hidden states: where the target cannot run, neither can
the drafter. A fact beside ``kernel_facts``, which reads the drafter's own files.

The target's model file is the drafter's module less ``_mtp`` (vLLM's naming), where the
drafter's module imports from it. One fact so far: a class of it whose ``__init__`` always asserts
``<config>.zero_expert_type is not None`` and always hands ``zero_expert_type=`` to vLLM's MoE
factory (every MoE layer routes through zero experts); vLLM's router factory picks its zero-expert
router before its CPU router (``if zero_expert_type is not None`` ahead of ``is_cpu()``); and the
branch of that router's routing function for the target's scoring function (the call's
``scoring_func``, else the factory's default) calls a compiled operator this build does not
register. LongCat Flash's ``LongcatMoe`` on vLLM 0.34 and 0.32 here: softmax,
``torch.ops._moe_C.topk_softmax``, absent from both CPU builds.
"""

from __future__ import annotations

import ast

from draft_head_fp8.vllm_plugin import class_source, kernel_facts, sparse_facts
from draft_head_fp8.vllm_plugin.class_source import ClassRef

ZERO = "zero_expert_type"
SCORING = "scoring_func"
FACTORY = "vllm.model_executor.layers.fused_moe.router.router_factory"
ROUTING = "_compute_routing"


def target_module(chain: tuple[ClassRef, ...]) -> str | None:
    """The target's model file: the drafter's module less ``_mtp``, which that module imports."""
    name = chain[0].module
    module = class_source.read_module(name)
    if not name.endswith("_mtp") or module is None:
        return None
    target = name.removesuffix("_mtp")
    imported = any(where == target for found in module.imports.values() for where, _ in found)
    return target if imported and class_source.read_module(target) is not None else None


def _asserts_zero(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.Assert)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == ZERO
        and isinstance(test.ops[0], ast.IsNot)
    )


def zero_expert_moe(module_name: str) -> tuple[str, ast.Call] | None:
    """(class, the call it hands ``zero_expert_type=`` to) for the first class of the module
    whose ``__init__`` always asserts it set and always hands it on."""
    module = class_source.read_module(module_name)
    for cls in module.classes.values() if module else ():
        init = next((f for f in cls.body if getattr(f, "name", "") == "__init__"), None)
        run = list(kernel_facts._unguarded(init.body)) if isinstance(init, ast.FunctionDef) else []
        calls = [
            n for n in run if isinstance(n, ast.Call) and any(k.arg == ZERO for k in n.keywords)
        ]
        if calls and any(map(_asserts_zero, run)):
            return f"{module_name}:{cls.name}", calls[0]
    return None


def scoring(module_name: str, call: ast.Call) -> str | None:
    """The scoring function the call asks for: its keyword, else the callee's default."""
    for keyword in call.keywords:
        if keyword.arg == SCORING:
            value = keyword.value
            return value.value if isinstance(value, ast.Constant) else None
    callee = sparse_facts.function(module_name, class_source.name_of(call.func) or "")
    if callee is None:
        return None
    args = callee.args
    pairs = [*zip(args.args[::-1], args.defaults[::-1]), *zip(args.kwonlyargs, args.kw_defaults)]
    for arg, default in pairs:
        if arg.arg == SCORING and isinstance(default, ast.Constant):
            return default.value
    return None


def zero_router_before_cpu() -> str | None:
    """The router class vLLM's router factory builds for zero experts, where it asks for them
    before it asks ``is_cpu()`` and never reaches the CPU router then (its branch returns, or the
    CPU test is its ``elif``); None where it does not."""
    module = class_source.read_module(FACTORY)
    for function in module.tree.body if module else ():
        if not isinstance(function, ast.FunctionDef):
            continue
        ifs = [n for n in ast.walk(function) if isinstance(n, ast.If)]
        zero = next((n for n in ifs if ast.unparse(n.test) == f"{ZERO} is not None"), None)
        cpu = next((n for n in ifs if "is_cpu()" in ast.unparse(n.test)), None)
        if zero is None or cpu is None or cpu.lineno < zero.lineno:
            continue
        returns = any(isinstance(n, ast.Return) for n in zero.body)
        if returns or cpu in zero.orelse:
            built = (
                class_source.name_of(n.func) for n in ast.walk(zero) if isinstance(n, ast.Call)
            )
            return next((b for b in built if b and b.endswith("Router")), None)
    return None


def _wrapped(wrapper: str) -> list[tuple[str, str]]:
    """(namespace, operator) of each ``torch.ops.<namespace>.<operator>`` that a function of
    vLLM's ``_custom_ops`` calls."""
    module = class_source.read_module(kernel_facts._seam()[0])
    function = sparse_facts.function(module.name, wrapper) if module else None
    found = []
    for node in ast.walk(function) if function else ():
        parts = ast.unparse(node).split(".") if isinstance(node, ast.Attribute) else []
        if len(parts) == 4 and parts[:2] == ["torch", "ops"]:
            found.append((parts[2], parts[3]))
    return found


def _ops_in(module_name: str, body: list[ast.stmt], depth: int = 0) -> list[tuple[str, str]]:
    """The compiled operators the statements call through ``ops.<wrapper>``, directly or in a
    function of the same module they call."""
    found = []
    for node in (n for s in body for n in ast.walk(s)):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "ops":
            found += _wrapped(node.func.attr)
        elif isinstance(node.func, ast.Name) and depth < 2:
            inner = sparse_facts.function(module_name, node.func.id)
            if inner is not None:
                found += _ops_in(module_name, inner.body, depth + 1)
    return found


def routing_ops(router: str, scored: str) -> list[tuple[str, str]]:
    """The compiled operators the router's routing calls for the scoring function: in the
    ``if scoring_func == <scored>`` branch of each function its routing always calls."""
    ref = class_source.find_class(FACTORY, router)
    found = class_source.method((ref,), ROUTING) if ref else None
    ops = []
    for node in kernel_facts._unguarded(found[1].body) if found else ():
        name = (
            node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else ""
        )
        callee = sparse_facts.function(ref.module, name) if name else None
        for branch in ast.walk(callee) if callee else ():
            test = ast.unparse(branch.test) if isinstance(branch, ast.If) else ""
            if test == f"{SCORING} == {scored!r}":
                ops += _ops_in(_defined_in(ref.module, name), branch.body)
    return ops


def _defined_in(module_name: str, name: str) -> str:
    """The module that defines the function a module names (following one import)."""
    module = class_source.read_module(module_name)
    for where, original in module.imports.get(name, ()) if module else ():
        if original == name and class_source.read_module(where) is not None:
            return where
    return module_name


def registered(namespace: str, op: str) -> bool | None:
    try:
        from draft_head_fp8.vllm_plugin import seams

        return hasattr(getattr(seams.read("kernel_ops"), namespace), op)
    except Exception:
        return None


def target_kernel_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why vLLM cannot run the MTP drafter's target with this build's kernels, and what would;
    None where its source says nothing of the kind."""
    target = target_module(chain)
    moe = zero_expert_moe(target) if target else None
    router = zero_router_before_cpu() if moe else None
    scored = scoring(target, moe[1]) if moe and router else None
    for namespace, op in routing_ops(router, scored) if router and scored else ():
        if registered(namespace, op) is False:
            return (
                f"its target's model file, {target}, builds {moe[0]}, which always routes its "
                f"experts through zero experts ({ZERO} asserted set), and vLLM's router factory "
                f"picks its {router} for them before its CPU router; for the target's scoring "
                f"function ({scored}) that router calls torch.ops.{namespace}.{op}, which this "
                "vLLM build's compiled kernels do not register: vLLM stops at the target's first "
                "forward, flag off too; it needs a vLLM build with that kernel, as vLLM's CUDA "
                "build has"
            )
    return None
