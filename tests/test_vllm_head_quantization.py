"""vLLM's own draft-head quantization (``draft_lm_head_quantization``, vLLM 0.33+) beside the flag:
one exact refusal at start-up naming both settings. vLLM 0.32 (installed) has no such field; the
0.33 and 0.34 ``SpeculativeConfig`` classes are checked in test_vllm_releases."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.policy import vllm_head_quantization_conflict


def test_the_reason_names_both_settings_and_what_each_does():
    assert vllm_head_quantization_conflict("fp8") == (
        "vLLM's own draft-head quantization is also set (speculative_config "
        "draft_lm_head_quantization='fp8': vLLM serves the drafter a fp8 copy of the target's "
        "head, with no exactness: its draft tokens may differ from the BF16 head's); "
        "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8 serves an FP8 head whose draft tokens are exactly the "
        "BF16 head's, proven by a receipt; set one of them: remove draft_lm_head_quantization, or "
        "unset VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"
    )


@pytest.mark.parametrize("scheme", ["fp8", "nvfp4"])
def test_either_of_vllms_schemes_refuses_with_the_flag(scheme, capsys):
    from draft_head_fp8.vllm_plugin.drafter import one_head_quantization

    with pytest.raises(HeadFp8EligibilityError) as refused:
        one_head_quantization(SimpleNamespace(draft_lm_head_quantization=scheme))
    assert str(refused.value) == vllm_head_quantization_conflict(scheme)


def test_vllm_032s_speculative_config_has_no_such_field_and_starts():
    from vllm.config import SpeculativeConfig

    from draft_head_fp8.vllm_plugin.drafter import one_head_quantization

    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    assert "draft_lm_head_quantization" not in fields
    assert "draft_sample_method" in fields  # a field the plugin does read, so this is the class
    one_head_quantization(object.__new__(SpeculativeConfig))  # nothing to refuse
    one_head_quantization(SimpleNamespace(draft_lm_head_quantization=None))


@pytest.mark.engine
def test_on_vllm_034s_engine_asking_for_both_refuses_start_up_with_that_reason(tmp_path):
    """The release where the field exists, on its engine: a user who sets vLLM's own FP8 head
    copy and the flag gets the one reason before any weight is quantized, and nothing archived."""
    from engine_support import V034, serve, tree

    from draft_head_fp8.tiny import build

    pair = build("llama-eagle1", tmp_path / "pair", seed=11)
    option = ("--speculative-option", "draft_lm_head_quantization=fp8")
    run = serve(tmp_path, pair, flag=True, args=option, engine=V034.name).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and vllm_head_quantization_conflict("fp8") in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
