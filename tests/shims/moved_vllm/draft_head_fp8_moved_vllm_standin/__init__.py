"""Test-only: a vLLM that moved methods the plugin wraps, made by deleting them from the classes
that define them (the seams table's rows for this release, and their bases). See ../README.md for
what it stands for and what it cannot show."""

from __future__ import annotations

import importlib
import os

# Which of the seams table's wrapped methods this vLLM lacks: "reload_weights,wake_up".
REMOVED_ENV = "DRAFT_HEAD_FP8_STANDIN_REMOVED"


def register() -> None:
    from draft_head_fp8.vllm_plugin import seams

    removed = [name for name in os.environ.get(REMOVED_ENV, "").split(",") if name]
    for method in seams.WRAPPED_METHODS:
        if method.name not in removed:
            continue
        for where in method.location(seams.installed_release()):
            module_name, _, class_name = where.partition(":")
            for cls in getattr(importlib.import_module(module_name), class_name).__mro__:
                if method.name in vars(cls):
                    delattr(cls, method.name)
