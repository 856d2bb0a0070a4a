"""The pieces of the test-only torchvision stand-in (see ``torchvision/__init__.py``)."""

from __future__ import annotations

import enum
from collections.abc import Callable

SHIM = "tests/shims/torchvision (a test-only stand-in, not torchvision)"


def absent(module: str) -> Callable[[str], object]:
    """A module ``__getattr__``: every name not defined is missing. AttributeError, not
    RuntimeError: the import system and ``hasattr`` probe modules this way (``__path__``, a
    submodule's name before importing it) and must be told "no"."""

    def __getattr__(name: str) -> object:
        raise AttributeError(f"{module}.{name} is not defined in {SHIM}")

    return __getattr__


class Unavailable:
    """A name bound at import time that must never be used: calling it, or reading any attribute
    of it, raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self) -> RuntimeError:
        return RuntimeError(
            f"{self._name} was used, but this process runs {SHIM}: only imports work here; "
            "install torchvision to process images or video"
        )

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise self._refuse()

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__"):  # copy, pickle, inspect: no such special attribute
            raise AttributeError(attribute)
        raise self._refuse()

    def __repr__(self) -> str:
        return f"<{self._name}: unavailable, {SHIM}>"


class InterpolationMode(enum.Enum):
    """torchvision's enum by member and value: transformers' ``image_utils`` maps PIL's
    resampling filters to these members when it builds a module-level table."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"
