"""Test-only: fill vLLM's model-info cache for the suite's architectures in one process.

vLLM inspects each model class it meets (``_ModelInfo.from_model_cls``) in a subprocess of its own,
once per cache, ~10 s each here (a fresh interpreter importing vLLM); the suite meets ~20 classes,
stock and this package's. This runs the same inspection, vLLM's code, for all of them in one
interpreter and leaves the answers where the engines look (``$VLLM_CACHE_ROOT/modelinfos``), as a
user's second launch finds them. vLLM inspects in a subprocess only to keep CUDA uninitialised in
the parent; there is no CUDA here.

    python tests/model_info_warmup.py ARCHITECTURE...   (the flag set: this package's classes too)
"""

from __future__ import annotations

import sys


def main(architectures: list[str]) -> int:
    from vllm import ModelRegistry
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda inspect: inspect()

    from draft_head_fp8.vllm_plugin import register

    # A record's architecture this release does not know (0.34's DFlash2RicursiveDraftModel on
    # 0.32) is not this release's to inspect: the plugin registers none of those either.
    known = ModelRegistry.get_supported_archs()
    architectures = [a for a in architectures if a in known]
    missing = [a for a in architectures if ModelRegistry._try_inspect_model_cls(a) is None]
    register()  # the flag is set: now the same names resolve to this package's classes
    missing += [a for a in architectures if ModelRegistry._try_inspect_model_cls(a) is None]
    if missing:
        print(f"model-info warm-up: vLLM could not inspect {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
