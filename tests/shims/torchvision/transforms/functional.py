"""Stand-in (tests only; see ``torchvision/__init__.py``): transformers' ``image_utils`` imports
``pil_to_tensor`` once torchvision looks installed."""

from torchvision._shim import Unavailable, absent

pil_to_tensor = Unavailable(f"{__name__}.pil_to_tensor")

__getattr__ = absent(__name__)
