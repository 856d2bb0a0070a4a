"""Every variable the package reads (settings.py): its default, the values it takes, and the one
line that refuses each bad value. The messages are restated here on purpose: they are what users
read when start-up is refused."""

from __future__ import annotations

import pytest

from draft_head_fp8 import settings
from draft_head_fp8.errors import HeadFp8EligibilityError

UNSET = [{}, {"OTHER": "1"}]


def _blank(name):
    return [{name: ""}, {name: "  "}]


# ------------------------------------------------------------------ defaults


@pytest.mark.parametrize("environ", UNSET + _blank("DRAFT_HEAD_FP8_ARCHIVE"))
def test_archive_root_defaults_to_none(environ):
    assert settings.archive_root(environ) is None


@pytest.mark.parametrize("environ", UNSET + _blank("DRAFT_HEAD_FP8_RESCORE_TOPK"))
def test_exact_pick_defaults_to_top_8(environ):
    assert settings.exact_pick_top_k(environ) == 8


@pytest.mark.parametrize("environ", UNSET + _blank("DRAFT_HEAD_FP8_CPU_KERNEL"))
def test_cpu_kernel_defaults_to_auto(environ):
    assert settings.cpu_kernel(environ) == "auto"


@pytest.mark.parametrize("environ", UNSET + _blank("DRAFT_HEAD_FP8_BF16_FROM"))
def test_bf16_from_defaults_to_auto(environ):
    assert settings.bf16_from(environ) == "auto"


def test_the_flag_is_recorded_as_set():
    assert settings.flag_as_set({}) is None
    name = "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"
    assert [settings.flag_as_set({name: v}) for v in ("1", " yes ", "")] == ["1", " yes ", ""]


def test_without_a_mapping_the_process_environment_is_read(monkeypatch):
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", " /srv/proofs ")
    monkeypatch.setenv("DRAFT_HEAD_FP8_RESCORE_TOPK", "3")
    monkeypatch.setenv("DRAFT_HEAD_FP8_CPU_KERNEL", "scaled_mm")
    monkeypatch.setenv("DRAFT_HEAD_FP8_BF16_FROM", "never")
    monkeypatch.setenv("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8", "1")
    assert settings.archive_root() == "/srv/proofs"
    assert settings.exact_pick_top_k() == 3
    assert settings.cpu_kernel() == "scaled_mm"
    assert settings.bf16_from() == "never"
    assert settings.flag_as_set() == "1"


# ------------------------------------------------------------------ good values


@pytest.mark.parametrize("raw, root", [("/srv/proofs", "/srv/proofs"), (" ~/p ", "~/p")])
def test_archive_root_is_the_folder_named(raw, root):
    assert settings.archive_root({"DRAFT_HEAD_FP8_ARCHIVE": raw}) == root


@pytest.mark.parametrize("raw, k", [("0", 0), ("1", 1), (" 4 ", 4), ("08", 8), ("64", 64)])
def test_exact_pick_takes_0_to_64(raw, k):
    assert settings.exact_pick_top_k({"DRAFT_HEAD_FP8_RESCORE_TOPK": raw}) == k


@pytest.mark.parametrize(
    "raw, kernel",
    [("auto", "auto"), ("AUTO", "auto"), ("scaled_mm", "scaled_mm"), (" Scaled_MM ", "scaled_mm")],
)
def test_cpu_kernel_takes_auto_or_scaled_mm(raw, kernel):
    assert settings.cpu_kernel({"DRAFT_HEAD_FP8_CPU_KERNEL": raw}) == kernel


@pytest.mark.parametrize(
    "raw, rows",
    [("auto", "auto"), ("Never", "never"), ("1", 1), (" 64 ", 64), ("262144", 262144)],
)
def test_bf16_from_takes_auto_never_or_rows(raw, rows):
    assert settings.bf16_from({"DRAFT_HEAD_FP8_BF16_FROM": raw}) == rows


# ------------------------------------------------------------------ bad values


def _refusal(read, name, raw):
    with pytest.raises(HeadFp8EligibilityError) as refused:
        read({name: raw})
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("raw", ["four", "-1", "65", "4.0", "0x8", "1e1"])
def test_exact_pick_refuses_anything_else_in_one_line(raw):
    assert _refusal(settings.exact_pick_top_k, "DRAFT_HEAD_FP8_RESCORE_TOPK", raw) == (
        f"DRAFT_HEAD_FP8_RESCORE_TOPK={raw!r} is not a whole number from 0 to 64 "
        "(0 = plain FP8 logits; unset = 8)"
    )


@pytest.mark.parametrize("raw", ["amx", "scaled-mm", "fp8_scaled_mm_cpu", "auto,scaled_mm"])
def test_cpu_kernel_refuses_anything_else_in_one_line(raw):
    assert _refusal(settings.cpu_kernel, "DRAFT_HEAD_FP8_CPU_KERNEL", raw) == (
        f"DRAFT_HEAD_FP8_CPU_KERNEL={raw!r} is not one of auto, scaled_mm (auto: vLLM's W8A16 "
        "op (fp8_scaled_mm_cpu) where vLLM ships it; refused where it does not)"
    )


@pytest.mark.parametrize("raw", ["0", "-2", "many", "1.5", "always"])
def test_bf16_from_refuses_anything_else_in_one_line(raw):
    assert _refusal(settings.bf16_from, "DRAFT_HEAD_FP8_BF16_FROM", raw) == (
        f"DRAFT_HEAD_FP8_BF16_FROM={raw!r} is not auto, never or a whole number of rows from 1 "
        "(auto: measured at load on a CPU; never: the FP8 head at every batch size)"
    )


def test_the_value_shown_is_the_value_given_without_its_blanks():
    assert _refusal(settings.cpu_kernel, "DRAFT_HEAD_FP8_CPU_KERNEL", "  amx ").startswith(
        "DRAFT_HEAD_FP8_CPU_KERNEL='amx' is not one of"
    )


def test_the_slow_cpu_override_names_the_variable_and_value():
    assert settings.SLOW_CPU_OVERRIDE == "DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm"


@pytest.mark.parametrize("raw, kernel", [(None, "auto"), ("Triton", "triton"), (" vllm ", "vllm")])
def test_head_kernel_takes_auto_triton_or_vllm(raw, kernel):
    environ = {} if raw is None else {"DRAFT_HEAD_FP8_KERNEL": raw}
    assert settings.head_kernel(environ) == kernel


def test_a_head_kernel_it_does_not_know_is_refused_with_what_is_allowed():
    with pytest.raises(HeadFp8EligibilityError) as refused:
        settings.head_kernel({"DRAFT_HEAD_FP8_KERNEL": "cutlass"})
    assert str(refused.value).startswith(
        "DRAFT_HEAD_FP8_KERNEL='cutlass' is not one of auto, triton, vllm (auto: the fused Triton"
    )
