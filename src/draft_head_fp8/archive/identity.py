"""What goes into a boot's boot.json: who started the engine, where, with which versions.

Environment variables are recorded only for the engine's own families (VLLM_*, DRAFT_HEAD_FP8_*,
CUDA_VISIBLE_DEVICES), and of those only the names of anything that looks like a secret, by name
or by value. Runs at every engine start, so it must stay cheap and must not import torch or vLLM.
"""

from __future__ import annotations

import copy
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import re
import socket
import sys
from typing import Any

__all__ = ["BOOT_SCHEMA", "collect_identity", "utc_now"]

BOOT_SCHEMA = "draft-head-fp8-archive-boot/v1"


def utc_now() -> str:
    """UTC, microseconds, trailing Z: the one timestamp form of boot.json, manifests and prune
    records."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.isoformat(timespec="microseconds").replace("+00:00", "Z")


_ENV_PREFIXES = ("VLLM_", "DRAFT_HEAD_FP8_")
_ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES"})
_SECRET_WORDS = (
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SIGNATURE",
)
# Values that are secrets whatever the variable is called: URLs with user:password@, well-known
# token prefixes (Hugging Face, OpenAI-style, GitHub, Slack).
_SECRET_VALUE = re.compile(r"://[^/\s:@]*:[^/\s@]*@|^(hf_|sk-|ghp_|gho_|github_pat_|xox[abprs]-)")
# Assigned by the archive: the numbering, and (for a multi-rank boot) the files it waits for.
_RESERVED_IDENTITY = frozenset({"schema", "seq", "launch_id", "boot", "expected_files"})


def _select_env(environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    kept, withheld = {}, []
    for name, value in environ.items():
        if not (name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES):
            continue
        upper = name.upper()
        if any(word in upper for word in _SECRET_WORDS) or _SECRET_VALUE.search(value):
            withheld.append(name)  # the name only: enough to see that it was set
        else:
            kept[name] = value
    return dict(sorted(kept.items())), sorted(withheld)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _container_id() -> str | None:
    cgroup = _read_text("/proc/self/cgroup") or ""
    m = re.search(r"[/:-]([0-9a-f]{64})(?:\.scope)?\s*$", cgroup, re.M)
    if m:
        return m.group(1)
    mountinfo = _read_text("/proc/self/mountinfo") or ""
    m = re.search(r"/containers/([0-9a-f]{64})/", mountinfo)
    return m.group(1) if m else None


def _cpu_model() -> str | None:
    for line in (_read_text("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _device_names() -> list[str] | None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            # Only when CUDA is already up: initialising it here would break vLLM's forked workers.
            if torch.cuda.is_initialized():
                return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:
            pass
    gpus = []
    try:
        for bus in sorted(os.listdir("/proc/driver/nvidia/gpus")):
            info = _read_text(f"/proc/driver/nvidia/gpus/{bus}/information") or ""
            for line in info.splitlines():
                if line.startswith("Model:"):
                    gpus.append(line.split(":", 1)[1].strip())
    except OSError:
        pass
    if gpus:
        return gpus
    if torch is not None:
        cpu = _cpu_model()
        return [cpu] if cpu else None
    return None


def _version(*dists: str) -> tuple[str | None, str | None]:
    for dist in dists:
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


@functools.lru_cache(maxsize=1)
def _static_identity() -> dict[str, Any]:
    # Fixed for the life of a process, and importlib.metadata costs milliseconds per lookup.
    # The vLLM that imports, named by the metadata beside it (machine.py): a CPU build of 0.34
    # first on the path is "vllm 0.34.0+cpu", whatever else is installed.
    from draft_head_fp8.machine import installed_vllm_version

    vllm_dist, vllm_version = installed_vllm_version()
    return {
        "kernel_boot_id": (_read_text("/proc/sys/kernel/random/boot_id") or "").strip() or None,
        "container_id": _container_id(),
        "kernel": platform.release(),
        "versions": {
            "python": platform.python_version(),
            "torch": _version("torch")[0],
            "vllm": vllm_version,
            "draft-head-fp8": _version("draft-head-fp8")[0],
        },
        "vllm_distribution": vllm_dist,
        "cpu_model": _cpu_model(),
    }


def collect_identity(
    *, extra: dict[str, Any] | None = None, environ: dict[str, str] | None = None
) -> dict[str, Any]:
    """The identity fields of boot.json (without seq/launch id); ``extra`` overrides detected
    fields."""
    environ = dict(os.environ if environ is None else environ)
    env, withheld = _select_env(environ)
    identity: dict[str, Any] = {
        "schema": BOOT_SCHEMA,
        "started_at": utc_now(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "invocation_id": environ.get("INVOCATION_ID"),
        **copy.deepcopy(_static_identity()),
        "device_names": _device_names(),
        "env": env,
        "env_withheld": withheld,
    }
    if extra:
        if not isinstance(extra, dict) or not all(isinstance(k, str) for k in extra):
            raise ValueError("extra identity fields must be a dict with string keys")
        clash = sorted(_RESERVED_IDENTITY & set(extra))
        if clash:
            raise ValueError(f"extra identity fields may not set {clash}; the archive assigns them")
        identity.update(extra)
    try:
        json.dumps(identity)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"extra identity fields must be JSON-serialisable: {exc}") from None
    return identity
