"""What attention backend a drafter's model files pin their layers to, read with ``ast``
(nothing imported from them), and whether this vLLM build can run it: a fact beside
``kernel_facts`` (a compiled operator the build lacks) for a class that names its backend itself
instead of letting vLLM choose one for the platform.

vLLM's ``Attention(..., attn_backend=X)`` takes ``X`` as given. Where ``X`` is (a subclass of)
vLLM's ``FlashAttentionBackend``, every forward runs vLLM's flash-attention kernels, which vLLM
binds only on CUDA and XPU (``v1/attention/backends/fa_utils.py``: ``flash_attn_varlen_func``
under ``current_platform.is_cuda()`` / ``is_xpu()``); on a CPU they are absent (seen with the
composed 0.34 engine: ``is_flash_attn_varlen_func_available()`` False). Step 5's MTP on vLLM 0.34
is such a class: the platform entry (``vllm/models/step5/__init__.py``) picks the NVIDIA
implementation everywhere but ROCm, and its decoder layer pins ``Step5SplitKVFlashAttentionBackend``
(or its DSA subclass) whatever the platform.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from draft_head_fp8.vllm_plugin import class_source, kernel_facts
from draft_head_fp8.vllm_plugin.class_source import ClassRef

FLASH = "FlashAttentionBackend"
KEYWORD = "attn_backend"
# Where vLLM binds its flash-attention kernels (fa_utils): the platforms that have them.
FLASH_PLATFORMS = ("is_cuda", "is_xpu")


def _flash_kernels_here() -> bool | None:
    """Whether this platform is one vLLM binds flash-attention kernels on; None unread."""
    answers = [class_source.platform_answer(a) for a in FLASH_PLATFORMS]
    if any(a is None for a in answers):
        return None
    return any(answers)


def _local_class(ref: ClassRef, function: ast.FunctionDef, name: str) -> ClassRef | None:
    """The vLLM class ``name`` is in ``function``: a function-local ``from X import name``, else
    the module's own binding."""
    package = class_source.read_module(ref.module)
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom) and package is not None:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    where = class_source._absolute(node, package.package)
                    return class_source.find_class(where, alias.name)
    return class_source.resolve(ref, ast.Name(id=name))


def _assigned(function: ast.FunctionDef, name: str) -> Iterator[str]:
    """The names ``name`` is bound to in ``function`` (``name = Other``), in any branch."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                yield node.value.id


def pinned(ref: ClassRef) -> Iterator[ClassRef]:
    """Every backend class ``ref``'s methods hand an attention layer as ``attn_backend``."""
    for function in (f for f in ref.node.body if isinstance(f, ast.FunctionDef)):
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg != KEYWORD or not isinstance(keyword.value, ast.Name):
                    continue
                names = [keyword.value.id, *_assigned(function, keyword.value.id)]
                for name in dict.fromkeys(names):
                    cls = _local_class(ref, function, name)
                    if cls is not None:
                        yield cls


def _built_whatever(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node ``body`` runs whatever the config says, short of refusing it: unguarded
    (``kernel_facts._unguarded``), and the branch of an ``if`` whose ``else`` only raises (Step
    5's decoder layer builds its attention under ``if config.att_impl_type == "GQA":``)."""
    for statement in body:
        refuses = isinstance(statement, ast.If) and statement.orelse
        if refuses and all(isinstance(s, ast.Raise) for s in statement.orelse):
            yield from _built_whatever(statement.body)
        else:
            yield from kernel_facts._unguarded([statement])


def always_built(chain: tuple[ClassRef, ...]) -> Iterator[ClassRef]:
    """The vLLM model classes the chain's ``__init__`` builds whatever its config says
    (``_built_whatever``: OpenPangu builds its sink attention, pinned to a flash backend, only
    for configs that ask for it), and what those build so, depth first (a class once)."""
    seen, todo = {ref.qualified for ref in chain}, [chain]
    while todo:
        links = todo.pop()
        for ref in links:
            for init in (f for f in ref.node.body if isinstance(f, ast.FunctionDef)):
                if init.name != "__init__":
                    continue
                for node in _built_whatever(init.body):
                    if not isinstance(node, ast.Call):
                        continue
                    cls = class_source.constructed(links, ref, node.func)
                    if cls is None or not class_source.is_model_class(cls):
                        continue
                    if cls.qualified not in seen:
                        seen.add(cls.qualified)
                        yield cls
                        todo.append(class_source.lineage(cls))


def _flash(backend: ClassRef) -> bool:
    return any(base.name == FLASH for base in class_source.lineage(backend))


def backend_error(chain: tuple[ClassRef, ...]) -> str | None:
    """Why this vLLM build cannot run the chain's class: a layer it always builds pins its
    attention, whichever way its config goes, to a backend whose kernels this platform lacks;
    None where none does (or nothing is known)."""
    if _flash_kernels_here() is not False:
        return None
    for cls in [*chain, *always_built(chain)]:
        backends = list(dict.fromkeys(pinned(cls)))
        flash = [backend.qualified for backend in backends if _flash(backend)]
        if flash and len(flash) == len(backends):
            return (
                f"{cls.qualified}, which it builds, pins its attention layers to "
                f"{' or '.join(flash)} ({KEYWORD}=), each a {FLASH}: vLLM binds the "
                "flash-attention kernels it runs (flash_attn_varlen_func) on CUDA and XPU only, "
                "so its first forward fails here; it needs a GPU"
            )
    return None
