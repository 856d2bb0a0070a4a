"""Public names (docs/contract.md, "Public names"): importable from the top-level package with the
contract's values and keyword-only signatures, without importing torch or vLLM."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import draft_head_fp8

PUBLIC = [
    "EXPERIMENT_ENV",
    "EXPECTED_ONLINE_SPEC",
    "EXPECTED_METHOD",
    "HeadFp8EligibilityError",
    "Eligibility",
    "env_enabled",
    "eligibility",
    "select_draft_head_method",
    "make_runtime_receipt",
    "validate_post_share_receipt",
    "write_runtime_receipt",
]


def _heavy_modules_after(code):
    probe = (
        f"{code}\n"
        "import json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'vllm'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_loads_neither_torch_nor_vllm():
    assert _heavy_modules_after("import draft_head_fp8") == []


def test_import_loads_no_plugin_module():
    # vLLM imports the package for the plugin's entry point in every process, flag off included:
    # the flag-off engine test pins that no draft_head_fp8.vllm_plugin.* module is loaded then.
    probe = (
        "import draft_head_fp8.vllm_plugin, json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.startswith('draft_head_fp8.vllm_plugin.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_core_modules_load_neither_torch_nor_vllm():
    code = (
        "import draft_head_fp8\n"
        "from draft_head_fp8 import policy, selection, fp8, schemas, evidence, preflight\n"
        "from draft_head_fp8.evidence import checks, receipt, snapshot, verdict, diagnostics\n"
        f"from draft_head_fp8 import {', '.join(PUBLIC)}\n"
        "validate = draft_head_fp8.validate_post_share_receipt\n"
        "try:\n"
        "    validate({})\n"
        "except draft_head_fp8.HeadFp8EligibilityError:\n"
        "    pass\n"
        "draft_head_fp8.eligibility(layer=None, quant_config=None, role='draft', prefix='lm_head',"
        " enabled=True,\n"
        "    ordered_embeddings=False, tie_word_embeddings=True)\n"
        "draft_head_fp8.env_enabled({})\n"
    )
    # eligibility() with layer=None never needs vLLM: the class test is by name.
    assert _heavy_modules_after(code) == []


def test_public_names_and_values():
    for name in PUBLIC:
        assert hasattr(draft_head_fp8, name), name
    assert set(PUBLIC) <= set(draft_head_fp8.__all__)
    assert draft_head_fp8.EXPERIMENT_ENV == "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"
    assert draft_head_fp8.EXPECTED_ONLINE_SPEC == "fp8_per_tensor_static"
    assert draft_head_fp8.EXPECTED_METHOD == "Fp8PerTensorOnlineLinearMethod"
    assert issubclass(draft_head_fp8.HeadFp8EligibilityError, ValueError)
    for name in PUBLIC[5:]:
        assert callable(getattr(draft_head_fp8, name)), name


def test_from_import_star():
    namespace: dict = {}
    exec("from draft_head_fp8 import *", namespace)
    for name in PUBLIC:
        assert namespace[name] is getattr(draft_head_fp8, name)


@pytest.mark.parametrize(
    "name, positional",
    [
        ("env_enabled", ["environ"]),
        ("validate_post_share_receipt", ["receipt"]),
        ("write_runtime_receipt", ["receipt", "path"]),
        ("eligibility", []),
        ("select_draft_head_method", []),
        ("make_runtime_receipt", []),
    ],
)
def test_keyword_only_where_the_overlay_had_it(name, positional):
    params = inspect.signature(getattr(draft_head_fp8, name)).parameters.values()
    assert [
        p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ] == positional
    assert not [
        p
        for p in params
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)
    ]


def test_signatures_follow_the_spec():
    sig = inspect.signature(draft_head_fp8.eligibility)
    assert list(sig.parameters) == [
        "layer",
        "quant_config",
        "role",
        "prefix",
        "enabled",
        "ordered_embeddings",
        "tie_word_embeddings",
        "head_dtype",
        "model_dtype",
        "parallel_lm_head_type",
        "parallel_lm_head_class",
        # Added for the families whose head is the target's (docs/contract.md, "Policy"):
        # optional, after the overlay's, so that every overlay call reads as before.
        "shared_target_head",
        "head_quant_method",
        "draft_vocab_size",
        "vocab_size",
        # A drafter's own untied head (EAGLE-3).
        "own_head",
        # One of the heads a drafter keeps per draft layer (Step3p5MTP).
        "layer_heads",
    ]
    for optional in (
        "head_dtype",
        "model_dtype",
        "parallel_lm_head_type",
        "parallel_lm_head_class",
        "head_quant_method",
        "draft_vocab_size",
        "vocab_size",
    ):
        assert sig.parameters[optional].default is None
    assert sig.parameters["shared_target_head"].default is False
    assert sig.parameters["own_head"].default is False
    select = inspect.signature(draft_head_fp8.select_draft_head_method)
    assert list(select.parameters) == list(sig.parameters) + ["method_factory"]
    assert select.parameters["method_factory"].default is None
    receipt = inspect.signature(draft_head_fp8.make_runtime_receipt)
    assert list(receipt.parameters) == [
        "head",
        "draft_model",
        "target_model",
        "decision",
        "phase",
        "target_lm_head",
    ]
    assert receipt.parameters["target_lm_head"].default is None
    assert inspect.signature(draft_head_fp8.env_enabled).parameters["environ"].default is None
