"""The package's shape, as docs/architecture.md promises it: policy is pure, imports form no
circle, and no module grows past what one reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draft_head_fp8"
MAX_LINES = 400  # "a few hundred lines apiece"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """Every module this file imports, at any depth (lazy imports in functions count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _package_edges() -> dict[str, set[str]]:
    edges = {}
    for name, path in MODULES.items():
        targets = set()
        for imported in _imports(path):
            # "from draft_head_fp8.evidence import checks" names a module; a function does not.
            if imported in MODULES and imported != name:
                targets.add(imported)
        # Importing a submodule runs its parent packages first, which is not a circle of ours.
        edges[name] = {t for t in targets if not name.startswith(t + ".")}
    return edges


def test_policy_never_imports_vllm_or_torch():
    imported = _imports(MODULES["draft_head_fp8.policy"])
    assert not {m for m in imported if m.split(".")[0] in ("vllm", "torch")}


def test_no_import_circles():
    edges = _package_edges()
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it by concern"
