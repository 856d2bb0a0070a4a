"""Run this Python process as on an AVX2-only x86 machine, for the tests and benchmarks of the
other machine kind (docs/benchmarks.md, "Three kinds of CPU"): on PYTHONPATH, with
``ATEN_CPU_CAPABILITY=avx2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` (torch's and oneDNN's own switches
to their AVX2 code), every process of an engine sees what vLLM sees on such a machine.

torch reports no AVX512, AVX512-BF16, VNNI or AMX, so vLLM loads its real ``_C_AVX2`` kernel
library (``CpuPlatform.import_kernels``), which has no ``fp8_scaled_mm_cpu``, and chooses every
other CPU kernel as it would there. Nothing else is changed: the vLLM code that runs is the
code an AVX2 machine runs. Timings taken this way are labelled as emulated wherever shown.
"""

import torch.cpu


def _no() -> bool:
    return False


for _name in (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_avx512_vnni_supported",
    "_is_vnni_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
):
    if hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, _no)
