"""The class vLLM builds for a speculative architecture, resolved as vLLM resolves it
(vllm_plugin/vllm_classes.py), and a family meeting a class it was not written for: refused by an
exact reason, never swapped for the class it was written for. On the installed vLLM (0.32); vLLM
0.33 and 0.34 are in test_vllm_releases."""

from __future__ import annotations

import pytest

from draft_head_fp8.families import all_families, by_name
from draft_head_fp8.policy import unexpected_drafter_class


def test_every_family_wraps_the_class_vllm_builds_here():
    from engine_support import NEEDS_TORCHVISION

    from draft_head_fp8.vllm_plugin import vllm_classes

    known = vllm_classes.speculative_architectures()
    for family in all_families():
        for architecture, written_for in family.drafters.items():
            if family.name in NEEDS_TORCHVISION:
                continue  # its model file imports torchvision: checked in test_vllm_releases
            if architecture not in known:  # a later release's name: checked there too
                with pytest.raises(KeyError, match="has no speculative architecture"):
                    vllm_classes.vllm_class(architecture)
                continue
            assert vllm_classes.qualified(vllm_classes.vllm_class(architecture)) == written_for


def test_a_class_the_family_was_not_written_for_is_refused_by_name_never_swapped():
    from draft_head_fp8.vllm_plugin import drafter, vllm_classes

    family = by_name("qwen35-mtp")

    # What vLLM 0.34 builds on CUDA (its module imports CUDA-only ops, so only its name here).
    nvidia = type("Qwen3_5MoeMTP", (), {"__module__": "vllm.models.qwen3_5.nvidia.mtp"})
    reason = drafter.class_refusal(family, "Qwen3_5MoeMTP", nvidia)
    assert reason == unexpected_drafter_class(
        "Qwen3_5MoeMTP",
        "vllm.models.qwen3_5.nvidia.mtp:Qwen3_5MoeMTP",
        "vllm.model_executor.models.qwen3_5_mtp:Qwen3_5MoeMTP",
        "qwen35-mtp",
    )
    legacy = type("Qwen3_5MoeMTP", (), {"__module__": "vllm.model_executor.models.qwen3_5_mtp"})
    assert drafter.class_refusal(family, "Qwen3_5MoeMTP", legacy) is None
    assert vllm_classes.qualified(legacy) == family.drafters["Qwen3_5MoeMTP"]


def test_the_unexpected_class_reason_is_exact():
    assert unexpected_drafter_class("A", "m.n:A", "m.o:A", "fam") == (
        "vLLM builds A as m.n:A, which this package's family was not written for (the fam family "
        "wraps m.o:A; serving the other class instead would swap vLLM's implementation, and where "
        "this one keeps its head references is unread); unset VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8 to "
        "serve it as vLLM does"
    )


def test_the_refusing_class_subclasses_vllms_and_refuses_before_building(capsys):
    from vllm.model_executor.models.gemma4_mtp import Gemma4MTP

    from draft_head_fp8.errors import HeadFp8EligibilityError
    from draft_head_fp8.vllm_plugin.refusal import refusing_class

    cls = refusing_class("DraftHeadFp8Gemma4MTP", Gemma4MTP, "the reason", __name__)
    assert issubclass(cls, Gemma4MTP) and cls.refusal == "the reason"
    with pytest.raises(HeadFp8EligibilityError, match="^the reason$"):
        cls(vllm_config=None)
    assert capsys.readouterr().err == "draft-head-fp8: refusing to start: the reason\n"


def test_vllms_registry_entry_is_kept_when_the_plugin_replaces_it(monkeypatch):
    from vllm import ModelRegistry

    from draft_head_fp8.vllm_plugin import registry_entry, vllm_classes

    monkeypatch.setattr(vllm_classes, "_vllm_entries", {})
    monkeypatch.setitem(
        ModelRegistry.models, "Gemma4MTPModel", ModelRegistry.models["Gemma4MTPModel"]
    )
    vllm_classes.remember("Gemma4MTPModel")
    ModelRegistry.register_model(
        "Gemma4MTPModel", registry_entry(by_name("gemma4-mtp").drafters["Gemma4MTPModel"])
    )
    built = vllm_classes.vllm_class("Gemma4MTPModel")
    assert vllm_classes.qualified(built) == "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"
    # A process where the plugin never registered but the registry names ours: rebuilt from
    # vLLM's table, as vLLM builds its registry.
    monkeypatch.setattr(vllm_classes, "_vllm_entries", {})
    assert vllm_classes.qualified(vllm_classes.vllm_class("Gemma4MTPModel")) == (
        "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"
    )
