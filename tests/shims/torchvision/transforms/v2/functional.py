"""Stand-in (tests only; see ``torchvision/__init__.py``): the module transformers' Qwen2-VL image
processor imports unconditionally (``from torchvision.transforms.v2 import functional as tvF``),
the import that keeps vLLM's Qwen3.5 model files from loading without torchvision; its image and
video processors import it too once torchvision looks installed. They read its names only when
they process images, but for one: transformers' Gemma 4 image and video processors name
``tvF.InterpolationMode`` in their signatures' annotations, read when the module is imported
(a Gemma 4 DSpark target's). That is the enum ``torchvision.transforms`` holds; every other name
is missing."""

from torchvision._shim import InterpolationMode, absent

__all__ = ["InterpolationMode"]
__getattr__ = absent(__name__)
