"""vLLM's own source of a model class, read with ``ast``, never imported: where a class is
defined (following the imports of the module that names it), its vLLM bases, and what its
methods and constructors say. Several drafters' model files import CUDA-only packages or raise
on this platform when imported; their source can still be read.

A class is found the way Python would find it, from its module's text: a ``class`` statement in
that module, else the first ``import`` that binds the name (an NVIDIA or common implementation
before an AMD, XPU or TPU one, where a package picks one per platform). What cannot be found
is None, never a guess.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# Where a package keeps the implementation of another platform than the ones read first.
_OTHER_PLATFORMS = (".amd.", ".rocm.", ".xpu.", ".tpu.")
# vLLM's own modules whose classes can hold a drafter's modules; layers are not read into.
_MODEL_PACKAGES = ("vllm.model_executor.models.", "vllm.models.")


@dataclass(frozen=True)
class Module:
    name: str
    package: str  # what a relative import is relative to
    tree: ast.Module
    classes: dict[str, ast.ClassDef]
    # ``Name = Other`` at module level (``else`` of ``if TYPE_CHECKING:`` included): a base
    # chosen at import, as ``llama_eagle.py`` picks ``LlamaForCausalLM``.
    aliases: dict[str, ast.AST]
    # name -> (module, name there) of each ``from X import Y [as name]``, in the order read
    imports: dict[str, list[tuple[str, str]]]


@dataclass(frozen=True)
class ClassRef:
    """One class statement of vLLM's source: the module that defines it, and its node."""

    module: str
    name: str
    node: ast.ClassDef

    @property
    def qualified(self) -> str:
        return f"{self.module}:{self.name}"


def _vllm_root() -> Path | None:
    loaded = sys.modules.get("vllm")
    origin = getattr(loaded, "__file__", None)
    if origin is None:
        spec = importlib.util.find_spec("vllm")
        origin = None if spec is None else spec.origin
    return None if origin is None else Path(origin).parent


def module_file(module: str) -> Path | None:
    """The file of a vLLM module, from the package's folder alone (importing nothing)."""
    root = _vllm_root()
    parts = module.split(".")
    if root is None or parts[0] != "vllm":
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def read_module(module: str) -> Module | None:
    path = module_file(module)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return Module(
        module, package, tree, classes, dict(_aliases(tree.body)), _imports(tree, package)
    )


def _aliases(body: list[ast.stmt]) -> Iterator[tuple[str, ast.AST]]:
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _aliases(node.body + node.orelse)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Name, ast.Attribute))
        ):
            yield node.targets[0].id, node.value


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(tree: ast.Module, package: str) -> dict[str, list[tuple[str, str]]]:
    """Each ``from X import Y [as name]`` binding a name: those this platform's branches take
    first (``if current_platform.is_cuda():`` read as vLLM would run it), then those no branch
    rules out, each in source order, another platform's implementation after its peers."""
    found = []
    for node, live in _import_nodes(tree.body, True):
        where = _absolute(node, package)
        rank = {True: 0, None: 1, False: 2}[live]
        other = any(p in where + "." for p in _OTHER_PLATFORMS)
        for alias in node.names:
            found.append(
                ((rank, other, node.lineno), alias.asname or alias.name, where, alias.name)
            )
    found.sort(key=lambda item: item[0])
    imports: dict[str, list[tuple[str, str]]] = {}
    for _, name, where, original in found:
        imports.setdefault(name, []).append((where, original))
    return imports


def _import_nodes(body: list[ast.stmt], live: bool | None) -> Iterator[tuple[ast.ImportFrom, Any]]:
    """The imports of a module's statements (a module-level ``__getattr__`` included), each with
    whether its branch runs here: True, False, or None where that cannot be told."""
    for node in body:
        if isinstance(node, ast.ImportFrom):
            yield node, live
        elif isinstance(node, ast.If):
            test = _truth(node.test)
            yield from _import_nodes(node.body, _both(live, test))
            yield from _import_nodes(node.orelse, _both(live, None if test is None else not test))
        elif isinstance(node, (ast.Try, ast.FunctionDef, ast.With)):
            inner = list(node.body) + list(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                inner += handler.body
            yield from _import_nodes(inner, live)


def _both(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


def _truth(test: ast.AST) -> bool | None:
    """Whether a module-level branch test holds here: ``TYPE_CHECKING`` (false when running),
    ``current_platform.is_*()``, ``current_platform.device_type == ...``, and not/and/or of
    them; None for anything else."""
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_truth(v) for v in test.values]
        wanted = isinstance(test.op, ast.Or)
        if wanted in values:
            return wanted
        return (not wanted) if all(v is not None for v in values) else None
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute):
        if name_of(test.func.value) == "current_platform" and test.func.attr.startswith("is_"):
            return _platform(test.func.attr)
    if (
        isinstance(test, ast.Compare)
        and name_of(test.left) == "device_type"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
    ):
        device = _platform("device_type")
        if device is None:
            return None
        same = device == test.comparators[0].value
        return same if isinstance(test.ops[0], ast.Eq) else not same
    return None


@cache
def _platform(attribute: str) -> Any:
    """``vllm.platforms.current_platform``'s answer (the one thing read by importing vLLM)."""
    try:
        from draft_head_fp8.vllm_plugin import seams

        value = getattr(seams.read("current_platform"), attribute)
        return value() if callable(value) else value
    except Exception:
        return None


def platform_answer(attribute: str) -> Any:
    """What ``current_platform`` says of ``attribute`` (``is_cpu``...), None where unreadable."""
    return _platform(attribute)


@cache
def find_class(module: str, name: str, depth: int = 0) -> ClassRef | None:
    """The class statement that ``module``'s name ``name`` is, following imports."""
    source = read_module(module)
    if source is None or depth > 8:
        return None
    if name in source.classes:
        return ClassRef(module, name, source.classes[name])
    alias = source.aliases.get(name)
    if alias is not None and name_of(alias) != name:
        found = _resolve_in(module, alias, depth + 1)
        if found is not None:
            return found
    for where, original in source.imports.get(name, ()):
        if where.startswith("vllm."):
            found = find_class(where, original, depth + 1)
            if found is not None:
                return found
    return None


def name_of(node: ast.AST) -> str | None:
    """``X`` of ``X``, ``a.b.X``, ``X[...]``."""
    if isinstance(node, ast.Subscript):
        return name_of(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def resolve(ref: ClassRef, node: ast.AST) -> ClassRef | None:
    """The vLLM class an expression in ``ref``'s module names (a base, a constructor)."""
    return _resolve_in(ref.module, node)


def _resolve_in(module_name: str, node: ast.AST, depth: int = 0) -> ClassRef | None:
    name = name_of(node)
    if name is None:
        return None
    if isinstance(node, ast.Attribute):
        # module.Class, where ``module`` is imported from vLLM: read that module.
        module = read_module(module_name)
        if module is None or not isinstance(node.value, ast.Name):
            return None
        for where, original in module.imports.get(node.value.id, ()):
            found = find_class(f"{where}.{original}", name, depth + 1)
            if found is not None:
                return found
        return None
    return find_class(module_name, name, depth + 1)


@cache
def lineage(ref: ClassRef) -> tuple[ClassRef, ...]:
    """The class and its vLLM bases, in Python's method resolution order where the bases are
    vLLM's (a base outside vLLM, ``nn.Module``, ends that branch)."""
    chains = [lineage(base) for base in _bases(ref)]
    merged: list[ClassRef] = [ref]
    for chain in chains:
        for item in chain:
            if item in merged:
                merged.remove(item)
            merged.append(item)
    # Python's C3 puts a shared base after every class deriving from it: moving a repeated base
    # to its last place above does the same for the single-inheritance chains vLLM's files use.
    return tuple(merged)


def _bases(ref: ClassRef) -> list[ClassRef]:
    found = []
    for base in ref.node.bases:
        cls = resolve(ref, base)
        if cls is not None and cls != ref:
            found.append(cls)
    return found


def method(chain: tuple[ClassRef, ...], name: str) -> tuple[ClassRef, ast.FunctionDef] | None:
    """Where ``name`` is defined first along ``chain`` (the method Python would call)."""
    for ref in chain:
        for node in ref.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return ref, node
    return None


def class_value(chain: tuple[ClassRef, ...], name: str) -> tuple[bool, object]:
    """(found, value) of a class attribute along ``chain``; value is the literal, or the text of
    the expression where it is not one."""
    for ref in chain:
        for node in ref.node.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(node, ast.AnnAssign):
                target = node.target
            if isinstance(target, ast.Name) and target.id == name and node.value is not None:
                try:
                    return True, ast.literal_eval(node.value)
                except ValueError:
                    return True, ast.unparse(node.value)
    return False, None


def self_assignments(chain: tuple[ClassRef, ...]) -> Iterator[tuple[ClassRef, str, ast.AST]]:
    """(class, attribute, value) of every ``self.attribute = value`` in the chain's methods."""
    for ref in chain:
        for node in ast.walk(ref.node):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and node.value is not None
                ):
                    yield ref, target.attr, node.value


def is_model_class(ref: ClassRef) -> bool:
    return ref.module.startswith(_MODEL_PACKAGES)


def constructed(chain: tuple[ClassRef, ...], ref: ClassRef, func: ast.AST) -> ClassRef | None:
    """The vLLM class a constructor call in ``ref`` builds: a name, or ``self.model_cls`` (a
    class attribute along the chain, as DSpark's drafters choose their model)."""
    if isinstance(func, ast.Attribute) and name_of(func.value) in ("self", "cls"):
        for owner in chain:
            for node in owner.node.body:
                target = node.targets[0] if isinstance(node, ast.Assign) else None
                if isinstance(node, ast.AnnAssign):
                    target = node.target
                if isinstance(target, ast.Name) and target.id == func.attr and node.value:
                    return resolve(owner, node.value)
        return None
    return resolve(ref, func)


def attribute_class(chain: tuple[ClassRef, ...], attribute: str) -> ClassRef | None:
    """The vLLM model class the chain constructs into ``self.attribute``."""
    for ref, name, value in self_assignments(chain):
        if name == attribute and isinstance(value, ast.Call):
            cls = constructed(chain, ref, value.func)
            if cls is not None and is_model_class(cls):
                return cls
    return None
