"""vLLM's sources read without importing vLLM (or torch): whether a class defines a method, itself
or through the vLLM bases its module imports, and whether it assigns an attribute of its
instances. What the seams table checks where importing would cost seconds (``check``) or build
objects (an instance seam)."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any


def resolve(where: str) -> Any:
    """The value at ``module:attribute`` (a dotted attribute), imported."""
    module_name, _, path = where.partition(":")
    value = importlib.import_module(module_name)
    for attribute in path.split("."):
        value = getattr(value, attribute)
    return value


def source_of(module_name: str) -> Path | None:
    """The file of ``module_name`` found on ``sys.path`` without importing it (or vLLM)."""
    parts = module_name.split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@cache
def _parsed(path: Path) -> ast.Module:
    # Once per file: a release check asks each runner's and worker's module for seven methods.
    return ast.parse(path.read_text())


def class_in_source(module_name: str, class_name: str) -> ast.ClassDef | None:
    path = source_of(module_name)
    if path is None:
        return None
    for node in _parsed(path).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node
    return None


def defined_in_source(module_name: str, class_name: str, method: str, depth: int = 0) -> bool:
    """Whether ``module_name:class_name`` defines ``method``, itself or through a base class
    its module imports from vLLM, read from the sources alone (nothing imported)."""
    path = source_of(module_name)
    node = class_in_source(module_name, class_name)
    if path is None or node is None or depth > 8:
        return False
    if any(
        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method
        for item in node.body
    ):
        return True
    imported = {
        alias.asname or alias.name: (item.module, alias.name)
        for item in _parsed(path).body
        if isinstance(item, ast.ImportFrom) and item.module
        for alias in item.names
    }
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else None
        if name is None:
            continue
        module, cls = imported.get(name, (module_name, name))
        if module.startswith("vllm") and defined_in_source(module, cls, method, depth + 1):
            return True
    return False


def assigned_in_class(where: str) -> None:
    """Raise ``AttributeError`` unless ``module:Class.attribute``'s class assigns
    ``self.attribute`` in one of its methods (read from its source: no object is built)."""
    path, _, attribute = where.rpartition(".")
    cls = resolve(path)
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == attribute
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return
    raise AttributeError(f"{path} never sets self.{attribute}")
