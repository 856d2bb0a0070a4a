"""docs/architecture.md stays true: every module it names exists, and each step of the data's way
it draws is a call the code makes (the later module is imported by the earlier one)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import draft_head_fp8

PACKAGE = Path(draft_head_fp8.__file__).parent
ROOT = PACKAGE.parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()

# The diagram's steps, as (module, module it hands the data to): the arrows the doc draws.
STEPS = [
    ("vllm_plugin/drafter.py", "vllm_plugin/plan.py"),  # vLLM builds the drafter -> the plan
    ("vllm_plugin/drafter.py", "vllm_plugin/selection.py"),  # -> may this head be FP8?
    ("vllm_plugin/selection.py", "policy.py"),
    ("vllm_plugin/drafter.py", "vllm_plugin/post_share.py"),  # armed for the share
    ("vllm_plugin/head_method.py", "vllm_plugin/kernels.py"),  # quantize: kernel and layout
    ("vllm_plugin/head_method.py", "fp8.py"),
    ("vllm_plugin/head_method.py", "vllm_plugin/certified_pick.py"),  # the bound, the pick
    ("vllm_plugin/certified_pick.py", "certificate.py"),
    ("vllm_plugin/head_method.py", "vllm_plugin/batch_paths.py"),
    ("vllm_plugin/head_method.py", "rescore.py"),  # the pick without the certificate
    ("vllm_plugin/head_method.py", "vllm_plugin/fused_kernel.py"),
    ("vllm_plugin/fused_kernel.py", "fused_head.py"),
    ("vllm_plugin/head_method.py", "evidence/diagnostics.py"),
    ("vllm_plugin/post_share.py", "vllm_plugin/shared_head.py"),  # share -> private head
    ("vllm_plugin/shared_head.py", "vllm_plugin/selection.py"),  # its FP8 head method
    ("vllm_plugin/selection.py", "vllm_plugin/head_method.py"),
    ("vllm_plugin/head_method.py", "vllm_plugin/head_bytes.py"),  # hashed, quantized
    ("vllm_plugin/post_share.py", "evidence/receipt_v3.py"),  # capture
    ("vllm_plugin/post_share.py", "evidence/exact_pick.py"),
    ("vllm_plugin/post_share.py", "evidence/verdict.py"),  # validate
    ("evidence/verdict.py", "evidence/checks.py"),
    ("vllm_plugin/post_share.py", "vllm_plugin/launch.py"),  # archive, node by node
    ("vllm_plugin/launch.py", "evidence/ranks.py"),
    ("vllm_plugin/post_share.py", "archive/__init__.py"),
    ("vllm_plugin/post_share.py", "vllm_plugin/updates.py"),  # update: watched from the proof on
    ("vllm_plugin/updates.py", "vllm_plugin/seams.py"),
    ("vllm_plugin/updates.py", "vllm_plugin/update_proof.py"),
    ("vllm_plugin/update_proof.py", "archive/proofs.py"),
]


def _module(path: str) -> str:
    dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return f"draft_head_fp8.{dotted}"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _named_paths() -> set[str]:
    """Every ``x.py`` and ``dir/x.py`` the doc names (outside its tools/ and tests/ mentions)."""
    names = set(re.findall(r"(?<![\w/.])((?:[a-z_]+/)?[a-z_0-9]+\.py)\b", DOC))
    return {n for n in names if not n.startswith(("tools/", "tests/"))}


def _exists(name: str) -> bool:
    if (PACKAGE / name).is_file():
        return True
    # A bare module name inside a diagram line of its subpackage ("shared_head.py").
    return any(p.name == name for p in PACKAGE.rglob("*.py"))


def test_every_module_the_doc_names_exists():
    names = _named_paths()
    assert len(names) > 40
    assert sorted(n for n in names if not _exists(n)) == []
    archive = re.search(r"`archive/` \(([^)]*)\)", DOC)[1]
    for name in re.findall(r"`(\w+)`", archive):
        assert (PACKAGE / "archive" / f"{name}.py").is_file(), name


def test_the_tools_and_tests_the_doc_names_exist():
    for name in set(re.findall(r"\b((?:tools|tests)/[\w/]+(?:\.py|\.md)?)", DOC)):
        assert (ROOT / name).exists(), name


@pytest.mark.parametrize(("caller", "callee"), STEPS, ids=lambda s: s)
def test_each_step_the_doc_draws_is_a_call_the_code_makes(caller, callee):
    for path in (caller, callee):  # a package is named by its folder ("archive/")
        named = path.removesuffix("__init__.py") if path.endswith("__init__.py") else path
        assert (named.rsplit("/", 1)[-1] or named) in DOC, path
    assert (PACKAGE / caller).is_file() and (PACKAGE / callee).is_file()
    imported = _imports(PACKAGE / caller)
    assert _module(callee) in imported, f"{caller} does not import {callee}"
