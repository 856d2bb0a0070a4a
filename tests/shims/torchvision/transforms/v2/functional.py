"""Stand-in (tests only; see ``torchvision/__init__.py``): the module transformers' Qwen2-VL image
processor imports unconditionally (``from torchvision.transforms.v2 import functional as tvF``),
the import that keeps vLLM's Qwen3.5 model files from loading without torchvision; its image and
video processors import it too once torchvision looks installed. They read its names only when
they process images, so it defines none: every name is missing."""

from torchvision._shim import absent

__getattr__ = absent(__name__)
