"""Stand-in (tests only; see ``torchvision/__init__.py``): transformers' ``image_utils`` imports
these two names once torchvision looks installed; ``video_utils`` imports the module."""

from torchvision._shim import Unavailable, absent

ImageReadMode = Unavailable(f"{__name__}.ImageReadMode")
decode_image = Unavailable(f"{__name__}.decode_image")

__getattr__ = absent(__name__)
