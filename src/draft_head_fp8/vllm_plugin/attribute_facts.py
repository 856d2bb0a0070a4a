"""What vLLM's own source says fails when a drafter drafts, on any platform: a ``forward`` that
reads an attribute of a module its class builds, where that module's class never sets it. vLLM
builds such a drafter and loads its weights, and the first draft step raises ``AttributeError``
(``nn.Module.__getattr__``), with the flag off too. Read with ``ast``, nothing imported.

It happens where a subclass replaces its base's ``__init__`` (``nn.Module.__init__(self)``, not
``super().__init__()``) and builds another module under the name the base's inherited
``forward`` reads. OpenPangu's MTP layer (``OpenPanguMultiTokenPredictorLayer``) builds an
``OpenPanguDecoderLayer`` as ``mtp_block``, and the ``forward`` it inherits from DeepSeek's MTP
layer reads ``self.mtp_block.use_sequence_parallel_moe``, which DeepSeek's decoder layer sets
and OpenPangu's never does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache

from draft_head_fp8.vllm_plugin import build_facts, class_source
from draft_head_fp8.vllm_plugin.class_source import ClassRef

# A base outside vLLM whose attributes are known: torch's module (read from torch itself).
MODULE_BASES = ("nn.Module", "torch.nn.Module", "Module")


def always_run(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node a function body evaluates whatever its inputs: an ``if``'s or a ``while``'s
    test, not its branches; nothing of a nested function, a handler or a conditional
    expression's branches."""
    for statement in body:
        if isinstance(statement, (ast.If, ast.While)):
            yield from ast.walk(statement.test)
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        elif isinstance(statement, (ast.With, ast.Try)):
            yield from always_run(statement.body)
        elif isinstance(statement, ast.For):
            yield from ast.walk(statement.iter)
        else:
            skipped = {
                id(inner)
                for node in ast.walk(statement)
                if isinstance(node, ast.IfExp)
                for branch in (node.body, node.orelse)
                for inner in ast.walk(branch)
            }
            yield from (n for n in ast.walk(statement) if id(n) not in skipped)


def _reads_of_built(function: ast.FunctionDef) -> Iterator[tuple[str, str]]:
    """(X, Y) for each ``self.X.Y`` the function always reads."""
    for node in always_run(function.body):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Attribute)
            and class_source.name_of(node.value.value) == "self"
        ):
            yield node.value.attr, node.attr


@cache
def _module_attributes() -> frozenset[str]:
    try:
        import torch

        return frozenset(dir(torch.nn.Module()))  # its instance attributes too (training)
    except Exception:
        return frozenset()


def never_sets(cls: ClassRef, name: str) -> bool:
    """Whether no class of ``cls``'s lineage sets ``name`` (``self.name = ...``, a class
    attribute, a method or property) and its only base outside vLLM is torch's module, which
    has no such attribute either; False where a base cannot be read (no fact)."""
    chain = class_source.lineage(cls)
    for ref in chain:
        outside = [b for b in ref.node.bases if class_source.resolve(ref, b) is None]
        if any(ast.unparse(b) not in MODULE_BASES for b in outside):
            return False
    if not _module_attributes() or name in _module_attributes():
        return False
    if any(attr == name for _, attr, _ in class_source.self_assignments(chain)):
        return False
    if class_source.class_value(chain, name)[0] or class_source.method(chain, name):
        return False
    # A module of its own answering unknown names (``__getattr__``) may answer this one.
    return class_source.method(chain, "__getattr__") is None


def attribute_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why vLLM's drafting with the chain's class fails on any platform, and what would make it
    draft; None where its source says nothing of the kind."""
    for cls in (chain[0], *build_facts.built(chain)):
        links = class_source.lineage(cls)
        found = class_source.method(links, "forward")
        if found is None:
            continue
        owner, forward = found
        for attribute, name in _reads_of_built(forward):
            built = class_source.attribute_class(links, attribute)
            if built is not None and never_sets(built, name):
                return (
                    f"{owner.qualified}.forward, which {cls.qualified} runs, reads "
                    f"self.{attribute}.{name}, and {built.qualified}, which it builds as "
                    f"{attribute}, never sets {name}: its first draft step raises "
                    "AttributeError, flag off too, on any platform; it needs a vLLM whose "
                    f"class sets {name} or reads it where it is set"
                )
    return None
