"""The grace the front end gives the engine core on an ordinary stop (``shutdown_grace``): added
to vLLM's own timeout, flag on only, installed once, in the real vLLM module."""

from __future__ import annotations

import os
import subprocess
import sys

from draft_head_fp8.vllm_plugin import shutdown_grace
from draft_head_fp8.vllm_plugin.shutdown_grace import DEFAULT_S, GRACE_S, with_grace


def test_the_grace_is_added_to_vllms_timeout_whatever_it_is():
    def vllm_timeout(request_timeout, process_timeout):
        return process_timeout

    grace = with_grace(vllm_timeout)
    assert grace(0, 0) == GRACE_S  # vLLM's default: SIGTERM then SIGKILL at once
    assert grace(0, None) == DEFAULT_S + GRACE_S  # what vLLM waits where it is given none
    assert grace(30, 30.0) == 30.0 + GRACE_S  # a drain window keeps its whole length
    assert grace.__wrapped__ is vllm_timeout


def test_install_replaces_vllms_function_once_where_its_process_manager_calls_it():
    import vllm.v1.engine.utils as engine_utils

    original = engine_utils.get_engine_process_shutdown_timeout
    try:
        shutdown_grace.install()
        shutdown_grace.install()
        installed = engine_utils.get_engine_process_shutdown_timeout
        assert installed.draft_head_fp8_grace and installed.__wrapped__ is original
        assert installed(0, 0) == GRACE_S
    finally:
        engine_utils.get_engine_process_shutdown_timeout = original


def _installed_after_register(flag: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"}
    if flag is not None:
        env["VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"] = flag
    code = (
        "from draft_head_fp8.vllm_plugin import register; register(); "
        "import vllm.v1.engine.utils as u; "
        "print(getattr(u.get_engine_process_shutdown_timeout, 'draft_head_fp8_grace', False))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_flag_off_installs_nothing_and_flag_on_installs_the_grace():
    assert _installed_after_register(None) == "False"
    assert _installed_after_register("1") == "True"
