"""What vLLM's DSpark speculator asks of a drafter besides the methods the pick after the term
wraps (``seams.TERM_PICK_METHODS``), read with ``ast`` from the speculator's source and the
class's (nothing imported): each attribute it asks for only where the drafter has one
(``hasattr(self.model, ...)``, ``getattr(self.model, ..., default)``) and uses where that pick
does not see, that the class has: called between the term (``markov_bias``) and the pick
(``_sample_logits``), or asked before the head's logits with a ``return`` when it answers True.

In vLLM 0.34 these are ``apply_output_logit_transform`` (Muse Spark's multiplier and tanh soft
cap of the head's logits plus the term, before the pick) and ``sample_sequential`` (Muse Spark's
specialized decode, DeepSeek V4.1's ``FusedMarkovSampler``: the speculator's Markov loop and its
pick never run). Not these: ``has_recurrent_markov_head`` (the term still comes through
``markov_bias``), ``compute_draft_logits_local`` (tensor parallel only), ``lm_head``. Which of
them a served family's class has too is the judgment's (``verdicts``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache

from draft_head_fp8.vllm_plugin import class_source
from draft_head_fp8.vllm_plugin.class_source import ClassRef

TERM = "markov_bias"  # a drafter the DSpark speculator drives has it
_HEAD = "self.model.compute_draft_logits"  # the head's logits of the block
_PICK = "self._sample_logits"  # the speculator's pick of one position (greedy, or sampled)
_ASKS = ("hasattr", "getattr")
_SHORT = 60  # a condition longer than this is named by the strings it tests


def _asked_in(function: ast.FunctionDef) -> dict[str, ast.AST]:
    """What ``function`` asks of the drafter only where it has it -> how it refers to it then
    (``self.model.x``, or the local name ``getattr`` bound it to)."""
    found: dict[str, ast.AST] = {}
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and class_source.name_of(node.func) in _ASKS
            and len(node.args) >= 2
            and ast.unparse(node.args[0]) == "self.model"
            and isinstance(node.args[1], ast.Constant)
        ):
            found.setdefault(str(node.args[1].value), node)
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = next((k for k, v in found.items() if v is node.value), None)
            if name is not None and isinstance(node.targets[0], ast.Name):
                found[name] = node.targets[0]
    return found


def _lines(function: ast.FunctionDef, text: str) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(function)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == text
    ]


def _role(function: ast.FunctionDef, name: str, ref: ast.AST) -> str | None:
    """What the speculator does with the drafter's ``name`` in ``function`` that the pick after
    the term does not see, read from where it calls it; None where nothing of the kind."""
    called = ast.unparse(ref) if isinstance(ref, ast.Name) else f"self.model.{name}"
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
    calls = [n for n in calls if ast.unparse(n.func) == called]
    terms, heads = _lines(function, f"self.model.{TERM}"), _lines(function, _HEAD)
    picks = _lines(function, _PICK)
    for call in calls:
        if terms and picks and min(terms) < call.lineno < max(picks):
            return "applied to the head's logits plus the term before the pick"
        if heads and call.lineno < min(heads) and _returns_when(function, call):
            return "asked first: where it returns True, it has drafted every position itself"
    return None


def _returns_when(function: ast.FunctionDef, call: ast.Call) -> bool:
    """Whether ``call`` is in the test of an ``if`` whose body returns."""
    return any(
        isinstance(node, ast.If)
        and any(call is n for n in ast.walk(node.test))
        and any(isinstance(s, ast.Return) for s in node.body)
        for node in ast.walk(function)
    )


@cache
def asked() -> tuple[tuple[str, str], ...]:
    """(attribute, what vLLM's DSpark speculator does with it, in which method) of each that it
    asks of a drafter only where the drafter has it and uses where the pick after the term does
    not see (between the term and the pick, or instead of them)."""
    from draft_head_fp8.vllm_plugin import seams

    try:
        module, _, name = seams.DSPARK_SPECULATOR[seams.installed_release()].partition(":")
    except Exception:  # no vLLM, or a release without a DSpark speculator: no fact
        return ()
    ref = class_source.find_class(module, name)
    found: dict[str, str] = {}
    for node in [] if ref is None else ref.node.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for attribute, used_as in _asked_in(node).items():
            role = _role(node, attribute, used_as)
            if role is not None:
                found.setdefault(attribute, f"{role}, in {ref.name}.{node.name}")  # type: ignore[union-attr]
    return tuple(found.items())


def _condition(function: ast.FunctionDef, target: ast.AST) -> str | None:
    """The test of the ``if`` in ``function`` under which ``target`` runs, in short."""
    for node in ast.walk(function):
        if isinstance(node, ast.If) and any(target is n for s in node.body for n in ast.walk(s)):
            text = ast.unparse(node.test)
            if len(text) <= _SHORT:
                return text
            strings = [n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant)]
            named = ", ".join(repr(s) for s in strings if isinstance(s, str))
            return f"a condition on {named}" if named else "a condition holds"
    return None


def _how(chain: tuple[ClassRef, ...], name: str) -> str | None:
    """How the class has attribute ``name``: a method, set on ``self``, or a class attribute."""
    found = class_source.method(chain, name)
    if found is not None:
        return f"its method {found[0].name}.{name}"
    for ref in chain:
        for function in (f for f in ref.node.body if isinstance(f, ast.FunctionDef)):
            for node in ast.walk(function):
                if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                    continue
                target = node.targets[0]
                if not (isinstance(target, ast.Attribute) and target.attr == name):
                    continue
                if class_source.name_of(target.value) != "self":
                    continue
                value = node.value
                text = (
                    f"{class_source.name_of(value.func)}(...)"
                    if isinstance(value, ast.Call)
                    else ast.unparse(value)
                )
                when = _condition(function, node)
                where = f"set in {ref.name}.{function.name} to {text}"
                return where + (f" when {when}" if when else "")
    present, value = class_source.class_value(chain, name)
    return f"a class attribute ({name} = {value})" if present else None


def hooks(chain: tuple[ClassRef, ...]) -> Iterator[str]:
    """``name (how the class has it; what the speculator does with it)`` of each attribute
    ``asked`` names that the class has, for a class vLLM's DSpark speculator drives."""
    if class_source.method(chain, TERM) is None:
        return
    for name, asker in asked():
        how = _how(chain, name)
        if how is not None:
            yield f"{name} ({how}; {asker})"


def hook_name(hook: str) -> str:
    return hook.partition(" ")[0]
