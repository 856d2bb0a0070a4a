"""Tiny real checkpoints of every drafter family, for tests, the demo and benchmarks: built in
seconds with transformers, random weights, no network. One builder module per family (its
family record names it), each with ``build(out, *, seed=0, **variants) -> TinyPair`` and
``VARIANTS`` (name -> what it makes, e.g. a checkpoint the flag must refuse).

The trained pairs that ship with the package (drafts get accepted, so "counters identical"
means something) are ``shipped_pair(family)``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from draft_head_fp8.tiny.common import (
    TinyPair,
    docstrings,
    save_model,
    stdlib_files,
    tokenizer_corpus,
    train_tokenizer,
)

DATA = Path(__file__).resolve().parent.parent / "data"
# family -> the folder of its shipped trained pair (target/ and assistant/ inside)
SHIPPED = {
    "gemma4-mtp": DATA / "tiny_pair",
    "llama-eagle1": DATA / "tiny_eagle1_pair",
    "llama-eagle3": DATA / "tiny_eagle3_pair",
}
DEMO_FAMILY = "gemma4-mtp"


def shipped_pair(family: str = DEMO_FAMILY) -> TinyPair:
    """The trained pair of ``family`` that ships with the package."""
    folder = SHIPPED[family]
    return TinyPair(target=folder / "target", assistant=folder / "assistant")


def builder(family: str) -> ModuleType:
    """The tiny checkpoint builder module of ``family`` (a family name, e.g. "mimo-mtp")."""
    from draft_head_fp8.families import by_name

    return importlib.import_module(by_name(family).tiny)


def build(family: str, out: str | os.PathLike, *, seed: int = 0, **variants: Any) -> TinyPair:
    """Write a tiny random checkpoint of ``family`` into ``out`` (refuses a folder with files)."""
    module = builder(family)
    unknown = sorted(set(variants) - set(getattr(module, "VARIANTS", {})))
    if unknown:
        raise ValueError(f"{family} has no variant {', '.join(unknown)}")
    return module.build(Path(out), seed=seed, **variants)


def build_tiny_pair(out: str | os.PathLike, *, seed: int = 0, **variants: Any) -> TinyPair:
    """The demo family's tiny pair (what most tests run)."""
    return build(DEMO_FAMILY, out, seed=seed, **variants)


__all__ = [
    "SHIPPED",
    "TinyPair",
    "build",
    "build_tiny_pair",
    "builder",
    "docstrings",
    "save_model",
    "shipped_pair",
    "stdlib_files",
    "tokenizer_corpus",
    "train_tokenizer",
]
