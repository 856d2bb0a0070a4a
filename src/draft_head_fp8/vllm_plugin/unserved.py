"""Drafters no family serves (EAGLE-3, DFlash, the MTP models of other families): with the flag
on, each of vLLM's speculative-decoding architectures that no family claims is registered to a
class that refuses at construction, before the drafter loads a weight. Without this such a drafter
would start with its BF16 head and no receipt, and the flag would have been silently ignored.

The refusing class subclasses vLLM's own (made on first use, like the families' classes), so
vLLM's registry inspects what it always inspects; only ``__init__`` differs.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.families import all_families
from draft_head_fp8.policy import unserved_drafter
from draft_head_fp8.vllm_plugin.refusal import announce_refusal

UNSERVED_PREFIX = "DraftHeadFp8Unserved"
_MODELS = "vllm.model_executor.models"


@cache
def architectures() -> dict[str, str]:
    """vLLM's speculative-decoding architectures that no family serves -> ``module:Class``."""
    from vllm.model_executor.models import registry

    # A private table of vLLM's (0.32, 0.33): read it, and refuse nothing if it is ever gone.
    table = getattr(registry, "_SPECULATIVE_DECODING_MODELS", {})
    served = {architecture for family in all_families() for architecture in family.drafters}
    return {
        architecture: f"{module if module.startswith('vllm.') else f'{_MODELS}.{module}'}:{cls}"
        for architecture, (module, cls) in table.items()
        if architecture not in served
    }


def registry_entry(architecture: str) -> str:
    return f"{__name__}:{UNSERVED_PREFIX}{architecture}"


def _refuse(self: Any, *args: Any, **kwargs: Any) -> None:
    served = sorted({a for family in all_families() for a in family.drafters})
    exc = HeadFp8EligibilityError(unserved_drafter(self.unserved_architecture, served))
    announce_refusal(exc)
    raise exc


def refusing_class(name: str) -> type:
    architecture = name.removeprefix(UNSERVED_PREFIX)
    where = architectures().get(architecture) if name.startswith(UNSERVED_PREFIX) else None
    if where is None:
        raise AttributeError(f"{__name__} has no class {name!r}")
    module, _, attribute = where.partition(":")
    base = getattr(importlib.import_module(module), attribute)
    namespace = {"__init__": _refuse, "unserved_architecture": architecture, "__module__": __name__}
    cls = type(name, (base,), namespace)
    cls.__qualname__ = name
    return cls


def __getattr__(name: str) -> type:
    return refusing_class(name)
