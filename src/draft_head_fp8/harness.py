"""The one way this project starts a real vLLM engine for the demo, ``compare``, the tests and
the benchmarks: the environment it runs in, and the subprocess that runs it (``probe``).

Each engine runs in its own process because vLLM loads plugins once per process and the plugin
reads the flag then. Caches, temporary files and the archive go where the caller says, never into
the user's home by surprise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from draft_head_fp8.settings import ARCHIVE_ENV, EXPERIMENT_ENV

# Fast, stable CPU engines (shared notes): one OpenMP thread avoids 20-90x oversubscription
# slowdowns on small machines; no thread pinning. Both are ignored on CUDA.
CPU_ENGINE_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def engine_env(
    scratch: Path,
    *,
    flag: bool,
    archive: Path | None = None,
    plugins: bool = True,
    multiprocess: bool = False,
    isolate_home: bool = False,
    vllm_cache: Path | None = None,
    inductor_cache: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one engine process.

    ``scratch``: where vLLM's caches and temporary files go. ``flag``: the experiment flag, set
    or removed. ``plugins=False``: stock vLLM (an allowlist matching no plugin).
    ``isolate_home``: HOME and the XDG folders inside ``scratch`` too, for tests that check
    nothing is written anywhere else. Inherited ``VLLM_*``/``DRAFT_HEAD_FP8_*`` settings are
    dropped with ``isolate_home``, kept otherwise (a user's own settings are theirs).
    ``vllm_cache``: vLLM's cache folder, when several engines share one (vLLM inspects each
    model class once in a subprocess, ~20 s, and keeps the answer there); else in ``scratch``.
    ``inductor_cache``: torch inductor's cache, likewise: at TP > 1 vLLM compiles its vocab-shard
    mask (``get_masked_input_and_mask``) in every worker, ~20 s of C++ builds the first time, a
    cache hit after (a user's own launches share /tmp/torchinductor_<user> the same way).
    """
    env = dict(os.environ if environ is None else environ)
    if isolate_home:
        env = {k: v for k, v in env.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env.pop(EXPERIMENT_ENV, None)
    names = ("cache", "inductor", "tmp") + (("state", "home") if isolate_home else ())
    for name in names:
        (scratch / name).mkdir(parents=True, exist_ok=True)
    env.update(
        VLLM_CACHE_ROOT=str(vllm_cache or scratch / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(inductor_cache or scratch / "inductor"),
        TMPDIR=str(scratch / "tmp"),
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="1" if multiprocess else "0",
    )
    for key, value in CPU_ENGINE_ENV.items():
        env.setdefault(key, value)
    if isolate_home:
        env.update(
            XDG_STATE_HOME=str(scratch / "state"),
            XDG_CACHE_HOME=str(scratch / "cache"),
            HOME=str(scratch / "home"),
        )
    if flag:
        env[EXPERIMENT_ENV] = "1"
    if archive is not None:
        env[ARCHIVE_ENV] = str(archive)
    if not plugins:
        env["VLLM_PLUGINS"] = ""
    return env


@dataclass
class Launch:
    """One finished engine process: its exit status, the facts it wrote, and its output."""

    returncode: int
    facts: dict | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.facts is not None

    def tail(self, lines: int = 15) -> str:
        return "\n".join((self.stdout + self.stderr).strip().splitlines()[-lines:])


def probe_command(target: Path | str, assistant: Path | str, out: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "draft_head_fp8.probe",
        "--target", str(target), "--assistant", str(assistant), "--out", str(out), *args,
    ]  # fmt: skip


def launch(
    target: Path | str,
    assistant: Path | str,
    *,
    env: Mapping[str, str],
    out: Path,
    args: tuple[str, ...] = (),
    cwd: Path | None = None,
    log: Path | None = None,
    progress: Callable[[float], None] | None = None,
    timeout: float = 900,
) -> Launch:
    """Run the probe in a subprocess and wait for it; kill it after ``timeout`` seconds.

    Its stdout and stderr go to ``log`` and ``log`` + ``.stderr`` (kept) or to files beside
    ``out`` (removed afterwards); ``progress(seconds)`` is called about every 10 s.
    """
    out.unlink(missing_ok=True)
    command = probe_command(target, assistant, out, *args)
    stdout_path = log if log is not None else out.with_suffix(".stdout")
    stderr_path = stdout_path.with_name(stdout_path.name + ".stderr")
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(stdout_path, "w") as stdout, open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(command, env=dict(env), cwd=cwd, stdout=stdout, stderr=stderr)
        next_report = started + 10
        try:
            while proc.poll() is None:
                if time.monotonic() - started > timeout:
                    proc.kill()
                    break
                time.sleep(0.2)
                if progress is not None and time.monotonic() >= next_report:
                    progress(time.monotonic() - started)
                    next_report += 10
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    texts = [path.read_text(errors="replace") for path in (stdout_path, stderr_path)]
    if log is None:
        stdout_path.unlink(missing_ok=True)
        stderr_path.unlink(missing_ok=True)
    facts = json.loads(out.read_text()) if out.exists() else None
    return Launch(proc.returncode, facts, texts[0], texts[1], time.monotonic() - started)
