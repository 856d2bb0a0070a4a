"""Stand-in (tests only; see ``torchvision/__init__.py``): the package of ``functional``."""

from torchvision._shim import absent

__getattr__ = absent(__name__)
