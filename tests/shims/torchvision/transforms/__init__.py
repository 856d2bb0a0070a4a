"""Stand-in (tests only; see ``torchvision/__init__.py``): transformers' ``image_utils`` imports
``InterpolationMode`` once torchvision looks installed."""

from torchvision._shim import InterpolationMode, absent

__all__ = ["InterpolationMode"]
__getattr__ = absent(__name__)
