"""The whole test suite as on an AVX2-only x86 machine, on an AVX512 one: vLLM's AVX2 library
(torch reporting no AVX512/AMX, as ``tools/cpu_kinds/avx2``) and /proc/cpuinfo read without the
AVX512 and AMX flags (what ``check`` and the tests' machine kind see)::

    PYTHONPATH=$PWD/tools/cpu_kinds/avx2_machine ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
        .venv/bin/python -m pytest

Both patches apply when their module is first imported, so a process that imports neither (the
import-weight tests) sees nothing of this. CI runs on whichever kind it gets; this is how a
session on one kind runs the other's suite before it submits."""

import importlib.abc
import importlib.util
import sys


def _no() -> bool:
    return False


def _patch_torch_cpu(module) -> None:
    for name in (
        "_is_avx512_supported",
        "_is_avx512_bf16_supported",
        "_is_avx512_vnni_supported",
        "_is_vnni_supported",
        "_is_amx_tile_supported",
        "_is_amx_fp16_supported",
    ):
        if hasattr(module, name):
            setattr(module, name, _no)


def _patch_machine(module) -> None:
    real = module.read_flags

    def avx2_flags(path=module.CPUINFO):
        return frozenset(f for f in real(path) if not f.startswith(("avx512", "amx")))

    module.read_flags = avx2_flags


PATCHES = {"torch.cpu": _patch_torch_cpu, "draft_head_fp8.machine": _patch_machine}


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = PATCHES.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
