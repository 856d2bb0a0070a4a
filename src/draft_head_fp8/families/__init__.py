"""The drafter families, one module each: the first thing the data meets.

Every module of this package that defines ``FAMILY`` (a ``family.Family``) is a family; adding
one is adding a file (docs/architecture.md, "Adding a family"). Pure: no torch, no vLLM import,
so the plugin can register every family's architectures without loading a model file.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import Family, config_value


@cache
def all_families() -> tuple[Family, ...]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "family":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if isinstance(family, Family):
            found.append(family)
    return tuple(found)


def by_name(name: str) -> Family:
    for family in all_families():
        if family.name == name:
            return family
    known = ", ".join(f.name for f in all_families())
    raise KeyError(f"no drafter family {name!r} (known: {known})")


def by_drafter_class(class_name: str) -> tuple[Family, str] | None:
    """(family, vLLM architecture) of vLLM's drafter class named ``class_name``."""
    for family in all_families():
        for architecture, where in family.drafters.items():
            if where.rsplit(":", 1)[-1] == class_name:
                return family, architecture
    return None


def for_config(config: Any, folder: Path | None = None) -> Family | None:
    """The family a drafter checkpoint belongs to, from its config (and, where the config alone
    cannot tell, its folder's safetensors headers)."""
    families = all_families()
    # A family whose architecture the config names first: a model type can be shared by two
    # families (MiMo-V2-Omni's config is MiMo-V2-Flash's kind), an architecture is one's.
    named = set(config_value(config, "architectures") or ())
    for family in families:
        if named & set(family.hf_architectures) and family.is_drafter(config, folder):
            return family
    for family in families:
        if family.is_drafter(config, folder):
            return family
    return None


__all__ = ["Family", "all_families", "by_drafter_class", "by_name"]
