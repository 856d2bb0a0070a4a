"""What vLLM's source of a drafter class says about its head, read with ``ast``
(``class_source``), never by importing the class: which heads it builds and where, what its
``compute_logits`` passes to ``logits_processor`` and does to the logits after, whether it picks
greedy tokens some other way (``get_top_tokens``), whether vLLM's proposer treats it as an EAGLE
drafter with a head of its own (``has_own_lm_head``), and whether it maps draft ids to the
target's (``d2t``). The judgment of these facts is ``draft_head_fp8.verdicts``' (pure).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from draft_head_fp8.verdicts import ClassFacts
from draft_head_fp8.vllm_plugin import (
    after_head_facts,
    attribute_facts,
    backend_facts,
    build_facts,
    class_source,
    config_facts,
    kernel_facts,
    sparse_facts,
    target_facts,
    term_facts,
)
from draft_head_fp8.vllm_plugin.class_source import ClassRef

HEAD_CLASS = "ParallelLMHead"
OWN_PICK = "its own"  # a get_top_tokens that computes its pick itself
# Calls that put the head's output into another tensor: containers, not a change of the logits.
_CONTAINERS = ("ModuleList", "ModuleDict", "list", "dict", "tuple")
# In-place changes of the logits, by what they do.
_MASKS = ("index_fill_", "masked_fill_", "masked_fill", "index_fill")
_CHANGES = ("add_", "sub_", "mul_", "div_", "clamp_", "clamp", "tanh", "softmax", "log_softmax")
_GEMMS = ("addmm", "matmul", "mm", "linear", "einsum", "bmm")
_D2T = ("draft_id_to_target_id", "d2t")


def heads(chain: tuple[ClassRef, ...], prefix: str = "", depth: int = 0) -> list[str]:
    """Every path (``lm_head``, ``model.layers[].shared_head.head``) at which the chain builds a
    ``ParallelLMHead``, through the vLLM model classes it constructs; ``[]`` marks one per
    element of a list or dict of modules."""
    found: list[str] = []
    if depth > 5:
        return found
    for ref, attribute, value in class_source.self_assignments(chain):
        for call, many in _calls(value):
            path = f"{prefix}{attribute}{'[]' if many else ''}"
            if class_source.name_of(call.func) == HEAD_CLASS:
                found.append(path)
                continue
            cls = class_source.constructed(chain, ref, call.func)
            if cls is not None and class_source.is_model_class(cls) and cls not in chain:
                found += heads(class_source.lineage(cls), f"{path}.", depth + 1)
    return sorted(set(found))


def _calls(value: ast.AST, many: bool = False) -> Iterator[tuple[ast.Call, bool]]:
    """The constructor calls in an assigned value, and whether each builds many (in a
    comprehension, a list or a ModuleList/ModuleDict)."""
    if isinstance(value, (ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp)):
        many = True
    if isinstance(value, (ast.List, ast.Tuple, ast.Dict)):
        many = True
    if isinstance(value, ast.Call):
        if class_source.name_of(value.func) in _CONTAINERS:
            many = True
        else:
            yield value, many
    for child in ast.iter_child_nodes(value):
        yield from _calls(child, many)


def _text(node: ast.AST) -> str:
    """An expression as a path: ``self.`` dropped, any index ``[]``."""
    if isinstance(node, ast.Subscript):
        return f"{_text(node.value)}[]"
    if isinstance(node, ast.Attribute):
        base = _text(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Name) and node.id == "self":
        return ""
    return ast.unparse(node)


def _locals(function: ast.FunctionDef) -> dict[str, ast.AST]:
    """``name = value`` inside the function (the last one read)."""
    found: dict[str, ast.AST] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = node.value
    return found


def _paths(node: ast.AST, scope: dict[str, ast.AST], depth: int = 0) -> list[str]:
    """The paths an expression may be, local names expanded (``head = a if c else b``)."""
    if depth > 4:
        return [_text(node)]
    if isinstance(node, ast.IfExp):
        return _paths(node.body, scope, depth + 1) + _paths(node.orelse, scope, depth + 1)
    if isinstance(node, ast.BoolOp):
        return [p for value in node.values for p in _paths(value, scope, depth + 1)]
    if isinstance(node, ast.Name) and node.id == "self":
        return [""]
    if isinstance(node, ast.Name) and node.id in scope and scope[node.id] is not node:
        return _paths(scope[node.id], scope, depth + 1)
    if isinstance(node, ast.Attribute):
        return [f"{p}.{node.attr}" if p else node.attr for p in _paths(node.value, scope, depth)]
    if isinstance(node, ast.Subscript):
        return [f"{p}[]" for p in _paths(node.value, scope, depth)]
    return [_text(node)]


def _views(chain: tuple[ClassRef, ...]) -> dict[str, str]:
    """``self.x = list(self.y.values())``: x is a view of y's modules (GLM-5 Next's
    ``_mtp_layers`` of ``layers``), where vLLM's proposer shares them."""
    views = {}
    for _, attribute, value in class_source.self_assignments(chain):
        node = value
        while isinstance(node, ast.Call):
            if class_source.name_of(node.func) in ("list", "tuple") and len(node.args) == 1:
                node = node.args[0]
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("values",):
                node = node.func.value
            else:
                break
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr != attribute
        ):
            views[attribute] = node.attr
    return views


def _unview(path: str, views: dict[str, str]) -> str:
    root, dot, rest = path.partition("[]")
    return views.get(root, root) + dot + rest


def _head_arguments(function: ast.FunctionDef, attribute: str) -> list[str]:
    """What the function hands ``*.logits_processor(head, ...)`` (or ``*.<attribute>(head,
    ...)``) as the head, as paths."""
    scope = _locals(function)
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and node.args:
            if class_source.name_of(node.func) == attribute:
                found += _paths(node.args[0], scope)
    return found


def _parameters(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in function.args.args]


def _bind(call: ast.Call, function: ast.FunctionDef) -> dict[str, str]:
    """Parameter name of ``function`` -> the text the caller passes for it."""
    names = _parameters(function)[1:]  # without self
    bound = {name: _text(arg) for name, arg in zip(names, call.args, strict=False)}
    bound.update({k.arg: _text(k.value) for k in call.keywords if k.arg})
    return bound


def _delegations(function: ast.FunctionDef, name: str) -> Iterator[tuple[ast.Call, str]]:
    """``self.<attribute>.<name>(...)`` calls: the attribute's own method does the work."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == name
            and isinstance(node.func.value, ast.Attribute)
            and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == "self"
        ):
            yield node, node.func.value.attr


def _calls_super(function: ast.FunctionDef, name: str) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Call)
        and class_source.name_of(node.func.value.func) == "super"
        for node in ast.walk(function)
    )


def _reached_methods(chain: tuple[ClassRef, ...]) -> Iterator[ast.FunctionDef]:
    """Every method of the chain that a call can reach: the first definition of each name, and
    one it overrides only where the override calls ``super()``'s (a DSpark subclass's
    ``load_weights`` that replaces Qwen3 DSpark's, which says ``has_own_lm_head`` per checkpoint,
    never says it)."""
    open_names: dict[str, bool] = {}
    for ref in chain:
        for node in ref.node.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if open_names.get(node.name, True):
                open_names[node.name] = _calls_super(node, node.name)
                yield node


def _above(chain: tuple[ClassRef, ...], owner: ClassRef) -> tuple[ClassRef, ...]:
    """The chain after ``owner``: where ``super()`` looks."""
    return chain[chain.index(owner) + 1 :] if owner in chain else ()


def _rebase(path: str, bound: dict[str, str], attribute: str) -> str:
    root, dot, rest = path.partition(".")
    if root in bound:
        return bound[root] + dot + rest
    return f"{attribute}.{path}"


def logits_reading(
    chain: tuple[ClassRef, ...], depth: int = 0
) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(defines compute_logits, the heads its logits come from, what it does to them besides)."""
    found = class_source.method(chain, "compute_logits")
    if found is None or depth > 3:
        return found is not None, (), ()
    owner, function = found
    views = _views(chain)
    heads_read = [_unview(h, views) for h in _head_arguments(function, "logits_processor")]
    changes = list(_changes(function))
    if _calls_super(function, "compute_logits"):
        # ``super().compute_logits(...)``: the next class's, then this one's changes.
        _, above, above_changes = logits_reading(_above(chain, owner), depth + 1)
        heads_read += above
        changes = list(above_changes) + changes
    # ``self.model.compute_logits(...)``: the MTP predictor's own, reading its layers' heads.
    for call, attribute in _delegations(function, "compute_logits"):
        inner_class = class_source.attribute_class(chain, attribute)
        if inner_class is None:
            continue
        inner_chain = class_source.lineage(inner_class)
        inner = class_source.method(inner_chain, "compute_logits")
        _, inner_heads, inner_changes = logits_reading(inner_chain, depth + 1)
        bound = _bind(call, inner[1]) if inner else {}
        heads_read += [_rebase(h, bound, attribute) for h in inner_heads]
        changes += inner_changes
    return True, tuple(dict.fromkeys(heads_read)), tuple(dict.fromkeys(changes))


def _changes(function: ast.FunctionDef) -> Iterator[str]:
    """What the function does to the head's logits beyond returning them (d2t mapping apart)."""
    logits = _logits_names(function)
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            name = class_source.name_of(node.func)
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            if name in _GEMMS and any(
                isinstance(a, ast.Attribute)
                and a.attr in ("weight", "t")
                or (isinstance(a, ast.Call) and class_source.name_of(a.func) == "t")
                for a in ast.walk(node)
            ):
                yield f"own GEMM: {ast.unparse(node.func)}"
            elif owner is not None and class_source.name_of(owner) in logits:
                if name in _MASKS:
                    yield f"masks: {_text(node.func)}"
                elif name in _CHANGES:
                    yield f"changes: {_text(node.func)}"
        elif isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            if {class_source.name_of(node.left), class_source.name_of(node.right)} & logits:
                yield f"arithmetic: {_text(node)}"
        elif isinstance(node, ast.BinOp):
            yield f"own GEMM: {_text(node)}"
        elif isinstance(node, ast.AugAssign) and class_source.name_of(node.target) in logits:
            yield f"arithmetic: {_text(node)}"
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and class_source.name_of(t.value) in logits
            for t in node.targets
        ):
            yield f"masks: {ast.unparse(node)}"


def _logits_names(function: ast.FunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(
            isinstance(n, ast.Call)
            and class_source.name_of(n.func) in ("logits_processor", "compute_logits")
            for n in ast.walk(node.value)
        ):
            names.update(class_source.name_of(t) for t in node.targets)
    return {n for n in names if n}


def top_tokens(chain: tuple[ClassRef, ...], depth: int = 0) -> str | None:
    """None where the class picks no greedy tokens of its own; ``"head"`` where its
    ``get_top_tokens`` asks ``logits_processor.get_top_tokens`` of a head (the head's method
    still computes the logits); else what it calls instead."""
    found = class_source.method(chain, "get_top_tokens")
    if found is None or depth > 3:
        return None
    ways = set()
    for node in ast.walk(found[1]):
        if isinstance(node, ast.Call) and class_source.name_of(node.func) == "get_top_tokens":
            owner = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            if class_source.name_of(owner) == "logits_processor":
                ways.add("head")
                continue
            if isinstance(owner, ast.Call) and class_source.name_of(owner.func) == "super":
                ways.add(top_tokens(_above(chain, found[0]), depth + 1) or _text(node.func))
                continue
            inner = None
            if isinstance(owner, ast.Attribute) and class_source.name_of(owner.value) == "self":
                inner = class_source.attribute_class(chain, owner.attr)
            way = top_tokens(class_source.lineage(inner), depth + 1) if inner else None
            ways.add(way if way not in (None, OWN_PICK) else _text(node.func))
    return ", ".join(sorted(ways)) or OWN_PICK


def own_head(chain: tuple[ClassRef, ...]) -> str:
    """``has_own_lm_head`` as vLLM's proposer reads it: absent (an MTP drafter: always given the
    target's head), a constant, or set per checkpoint when its weights load."""
    set_to = {
        ast.unparse(value)
        for _, name, value in class_source.self_assignments(chain)
        if name == "has_own_lm_head"
    }
    calls = any(
        isinstance(node, ast.Call) and class_source.name_of(node.func) == "process_eagle_weight"
        for function in _reached_methods(chain)
        for node in ast.walk(function)
    )
    if calls or len(set_to) > 1 or set_to - {"True", "False"}:
        return "per checkpoint"  # set from what the checkpoint holds
    if set_to:
        return set_to.pop()  # one constant, set in __init__
    present, value = class_source.class_value(chain, "has_own_lm_head")
    return str(value) if present else "absent"


def raises(chain: tuple[ClassRef, ...]) -> str | None:
    """What the class's ``__init__`` raises before building anything (a platform's stub)."""
    found = class_source.method(chain, "__init__")
    if found is None:
        return None
    body = [n for n in found[1].body if not isinstance(n, ast.Expr)]
    if body and isinstance(body[0], ast.Raise) and body[0].exc is not None:
        exc = body[0].exc
        args = exc.args if isinstance(exc, ast.Call) else []
        message = " ".join(
            ast.literal_eval(a) if isinstance(a, ast.Constant) else _text(a) for a in args[:1]
        )
        kind = class_source.name_of(exc.func if isinstance(exc, ast.Call) else exc)
        return f"{kind}: {message}" if message else str(kind)
    return None


def maps_draft_ids(chain: tuple[ClassRef, ...]) -> bool:
    return any(
        isinstance(node, ast.Attribute) and node.attr in _D2T
        for ref in chain
        for node in ast.walk(ref.node)
    )


def facts(architecture: str, ref: ClassRef, **known: object) -> ClassFacts:
    """The facts of ``ref`` (the class vLLM builds for ``architecture``), read from its source;
    ``known`` adds what only this process can tell (``import_error``)."""
    chain = class_source.lineage(ref)
    defined, heads_read, changes = logits_reading(chain)
    return ClassFacts(
        architecture=architecture,
        vllm_class=ref.qualified,
        lineage=tuple(r.name for r in chain),
        raises=raises(chain),
        config_error=config_facts.config_error(architecture),
        attribute_error=attribute_facts.attribute_error(chain),
        build_error=build_facts.build_error(chain) or sparse_facts.sparse_error(chain),
        kernel_error=kernel_facts.kernel_error(chain)
        or target_facts.target_kernel_error(chain)
        or backend_facts.backend_error(chain),
        draft_error=build_facts.draft_error(chain),
        compute_logits=defined,
        logits_heads=heads_read,
        logits_changes=changes,
        top_tokens=top_tokens(chain),
        candidate_log_probs=after_head_facts.candidate_log_probs(chain),
        vocab_terms=tuple(sorted(set(after_head_facts.vocab_terms(chain)))),
        speculator_hooks=tuple(term_facts.hooks(chain)),
        heads=tuple(heads(chain)),
        has_own_lm_head=own_head(chain),
        d2t=maps_draft_ids(chain),
        **known,  # type: ignore[arg-type]
    )
