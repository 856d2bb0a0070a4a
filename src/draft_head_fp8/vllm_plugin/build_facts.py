"""What vLLM's own source says keeps a drafter's class from being built on this platform, read
with ``ast`` (nothing imported): where vLLM's shared layers provide for the platform and a
model's own module, constructed by the drafter, does not. A fact beside an import error: the
model file imports, vLLM constructs the class, and loading its weights fails.

One such fact so far, on a CPU: vLLM's unquantized linear method packs each linear layer's weight
for the CPU GEMM after loading and drops the weight (``dispatch_cpu_unquantized_gemm``), except
on a layer marked ``_cpu_skip_gemm_dispatch``. vLLM's own ``MLAAttention`` marks its
``kv_b_proj``, because it splits that weight after loading (``split_kv_b_proj``); a model's own
attention that splits ``kv_b_proj`` and never marks it finds an empty weight there (measured:
Kimi K3's ``MultiHeadLatentAttention``, ``AssertionError: kv_b_proj weight (0,) vs
kv_lora_rank=512 num_heads=2`` while vLLM 0.34 loads a tiny Kimi K3 here, text only, with
``VLLM_KIMI_K3_GEMM_AR=0``: by default its model file imports cutlass while building).

The same dropped weight, read later: a class whose post-load hook (``process_weights_after_
loading``, which vLLM runs after every layer's quant method) copies a linear layer's weight into
a buffer of its own, in a module that never asks ``is_cpu`` nor marks a layer to keep its
weight, builds and loads, and fails when it first drafts (``draft_error``). Measured: vLLM 0.34
drafting with a tiny Laguna DFlash pair here, flag off (``DFlashLagunaModel.
_build_context_kv_buffers`` stacks ``qkv_proj.weight[q_size:]``; the first draft step raises
``IndexError: Dimension out of range (expected to be in range of [-2, 1], but got 2)`` at
``self._kv_weights.transpose(1, 2)``). Qwen3 DFlash's module asks ``is_cpu`` and projects through
the layers there (engine-tested); vLLM 0.32's Laguna DFlash stacks the weight in ``load_weights``,
before it is dropped.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from draft_head_fp8.vllm_plugin import class_source
from draft_head_fp8.vllm_plugin.class_source import ClassRef

SPLITS = "split_kv_b_proj"
KEEPS = "_cpu_skip_gemm_dispatch"
POST_LOAD = "process_weights_after_loading"


def _on_cpu() -> bool:
    return class_source.platform_answer("is_cpu") is True


def built(chain: tuple[ClassRef, ...], depth: int = 0) -> Iterator[ClassRef]:
    """Every vLLM model class the chain constructs into its attributes, and what those
    construct, depth first (a class once)."""
    seen: set[str] = {ref.qualified for ref in chain}

    def walk(links: tuple[ClassRef, ...], level: int) -> Iterator[ClassRef]:
        if level > 6:
            return
        for ref, _, value in class_source.self_assignments(links):
            for node in ast.walk(value):
                if not isinstance(node, ast.Call):
                    continue
                cls = class_source.constructed(links, ref, node.func)
                if cls is None or not class_source.is_model_class(cls) or cls.qualified in seen:
                    continue
                seen.add(cls.qualified)
                yield cls
                yield from walk(class_source.lineage(cls), level + 1)

    yield from walk(chain, depth)


def _splits_unkept(ref: ClassRef) -> bool:
    """Whether ``ref`` splits ``kv_b_proj``'s weight after loading, in a module that never marks
    a layer to keep its weight on a CPU."""
    found = class_source.method((ref,), "process_weights_after_loading")
    if found is None:
        return False
    splits = any(
        isinstance(node, ast.Call) and class_source.name_of(node.func) == SPLITS
        for node in ast.walk(found[1])
    )
    module = class_source.read_module(ref.module)
    if not splits or module is None:
        return False
    return not any(isinstance(n, ast.Attribute) and n.attr == KEEPS for n in ast.walk(module.tree))


def build_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why vLLM cannot build the chain's class on this platform, and what would; None where
    its source says nothing of the kind."""
    if not _on_cpu():
        return None
    for cls in built(chain):
        if _splits_unkept(cls):
            return (
                f"{cls.qualified}, which it builds, splits kv_b_proj's weight after loading "
                f"({SPLITS}) without marking kv_b_proj {KEEPS}, as vLLM's own MLAAttention does "
                "on a CPU: vLLM's CPU linear method has dropped that weight by then, so loading "
                "fails; it needs a vLLM whose class keeps that weight on a CPU, or a GPU"
            )
    return None


def post_load(chain: tuple[ClassRef, ...]) -> Iterator[tuple[ClassRef, ast.FunctionDef]]:
    """Every method the drafter's post-load hook reaches: what it calls on ``self``, on
    ``super()`` or on a model it built (``self.model.x()``), each resolved along the lineage of
    the object it is called on (a base's method calling ``self.x()`` reaches the subclass's
    ``x``; ``super().x()`` the first base after the caller's class that defines it)."""
    todo, seen = [(chain, POST_LOAD, 0)], set()
    while todo:
        links, name, start = todo.pop()
        found = class_source.method(links[start:], name)
        if found is None or (links[0].qualified, name, start) in seen:
            continue
        seen.add((links[0].qualified, name, start))
        yield found
        for node in ast.walk(found[1]):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "self":
                todo.append((links, node.func.attr, 0))
            elif isinstance(owner, ast.Call) and class_source.name_of(owner.func) == "super":
                todo.append((links, node.func.attr, links.index(found[0]) + 1))
            elif isinstance(owner, ast.Attribute) and class_source.name_of(owner.value) == "self":
                cls = class_source.attribute_class(links, owner.attr)
                if cls is not None:
                    todo.append((class_source.lineage(cls), node.func.attr, 0))


def linear_weight_read(function: ast.FunctionDef) -> str | None:
    """The first ``<...>.<name>_proj.weight`` the function reads (vLLM names its linear layers
    ``*_proj``), as written; None where it reads none."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "weight"
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr.endswith("_proj")
        ):
            return ast.unparse(node)
    return None


def _minds_the_cpu(module_name: str) -> bool:
    """Whether the module asks ``is_cpu`` or marks a layer to keep its weight on a CPU."""
    module = class_source.read_module(module_name)
    if module is None:
        return True  # unread: no fact
    names = {n.attr for n in ast.walk(module.tree) if isinstance(n, ast.Attribute)}
    return bool(names & {"is_cpu", KEEPS})


def draft_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why vLLM builds and loads the chain's class on this platform but fails when it drafts,
    and what would make it draft; None where its source says nothing of the kind."""
    if not _on_cpu():
        return None
    for ref, function in post_load(chain):
        read = linear_weight_read(function)
        if read is not None and not _minds_the_cpu(ref.module):
            return (
                f"{ref.qualified}.{function.name}, which vLLM calls after loading, copies {read} "
                f"into a buffer of its own, and its module neither asks is_cpu nor marks a layer "
                f"{KEEPS}: on a CPU vLLM's linear method has packed that weight for its GEMM and "
                "dropped it by then, so the first draft step fails; it needs a vLLM whose class "
                "reads that weight before it is dropped or through the layer on a CPU, or a GPU"
            )
    return None
