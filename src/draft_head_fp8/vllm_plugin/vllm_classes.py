"""Which class the installed vLLM builds for a speculative-decoding architecture, resolved the way
vLLM resolves it: through the entry of vLLM's own ``ModelRegistry``, never a module path of ours.
A release can move an architecture to another class (vLLM 0.34 builds ``Qwen3_5MoeMTP`` from
``vllm.models.qwen3_5``, an NVIDIA implementation on CUDA, the old one elsewhere); wrapping a fixed
path would silently swap implementations.

The plugin overwrites the registry's entries of the architectures it serves or refuses, so
``register`` hands vLLM's entries here first (``remember``). In a process where the plugin never
registered (vLLM inspects a model class in a fresh subprocess), the registry's entry is still
vLLM's own; if it is ours the entry is rebuilt from vLLM's table as vLLM built it.

Resolution is lazy (when vLLM builds or inspects the drafter), not at registration: importing
every drafter's model file in every vLLM process costs seconds, and some cannot be imported on
every server (Qwen3.5's needs torchvision).
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.vllm_plugin import seams

PACKAGE = "draft_head_fp8."

# architecture -> vLLM's registry entry, as it was before the plugin registered its own
_vllm_entries: dict[str, Any] = {}


def speculative_architectures() -> dict[str, str]:
    """Every speculative-decoding architecture of the installed vLLM -> ``module:Class`` as its
    table names it (module names resolved as vLLM resolves them)."""
    resolve = seams.read("registry_module_name")
    table = seams.read("speculative_models")
    return {arch: f"{resolve(module)}:{cls}" for arch, (module, cls) in table.items()}


def remember(architecture: str) -> None:
    """Keep vLLM's registry entry for ``architecture`` before the plugin replaces it."""
    entry = seams.read("model_registry").models.get(architecture)
    if entry is not None and not _is_ours(entry):
        _vllm_entries.setdefault(architecture, entry)


def _is_ours(entry: Any) -> bool:
    module = getattr(entry, "module_name", None) or getattr(
        getattr(entry, "model_cls", None), "__module__", ""
    )
    return str(module).startswith(PACKAGE)


def registry_entry(architecture: str) -> Any:
    """vLLM's own registry entry for ``architecture``."""
    if architecture in _vllm_entries:
        return _vllm_entries[architecture]
    entry = seams.read("model_registry").models.get(architecture)
    if entry is not None and not _is_ours(entry):
        return entry
    where = speculative_architectures().get(architecture)
    if where is None:
        raise KeyError(f"the installed vLLM has no speculative architecture {architecture!r}")
    module, _, cls = where.partition(":")
    return seams.read("lazy_registered_model")(module_name=module, class_name=cls)


def vllm_class(architecture: str) -> type:
    """The class vLLM builds for ``architecture`` here (importing its model file)."""
    return registry_entry(architecture).load_model_cls()


def qualified(cls: type) -> str:
    """``module:Class`` of a class, the form families name vLLM's classes in."""
    return f"{cls.__module__}:{cls.__qualname__}"
