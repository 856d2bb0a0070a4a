"""The test-only torchvision stand-in (tests/shims/README.md): with it on PYTHONPATH, vLLM's
Qwen3.5 drafter file imports and every use of a torchvision name raises, naming the shim; without
it (this process, the package) nothing sees it. No engine: one Python process that imports vLLM's
model file."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIMS = ROOT / "tests" / "shims"  # what the Qwen3.5 engine subprocess puts first on PYTHONPATH


def test_the_pytest_process_and_the_package_never_see_the_shim():
    spec = importlib.util.find_spec("torchvision")
    assert spec is None or not str(spec.origin).startswith(str(SHIMS))
    package = ROOT / "src" / "draft_head_fp8"
    importing = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "torchvision" in _imported_roots(path)
    ]
    assert importing == []


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


PROBE = textwrap.dedent(
    """
    import importlib.util, json
    from transformers.utils import is_torchvision_available
    from vllm.model_executor.models.qwen3_5_mtp import Qwen3_5MoeMTP
    import torchvision.io
    import torchvision.transforms
    import torchvision.transforms.v2.functional as tvF
    from transformers.models.gemma4 import image_processing_gemma4, video_processing_gemma4

    def error(use):
        try:
            use()
        except Exception as exc:
            return [type(exc).__name__, str(exc)]
        return None

    print(json.dumps({
        "origin": importlib.util.find_spec("torchvision").origin,
        "drafter": Qwen3_5MoeMTP.__name__,
        "transformers_sees_torchvision": is_torchvision_available(),
        "call": error(lambda: torchvision.io.decode_image(b"")),
        "attribute": error(lambda: torchvision.io.ImageReadMode.RGB),
        "missing": error(lambda: tvF.resize),
        "v2_enum": tvF.InterpolationMode is torchvision.transforms.InterpolationMode,
        "gemma4_processors": [image_processing_gemma4.__name__, video_processing_gemma4.__name__],
    }))
    """
)


def test_with_the_shim_vllms_qwen35_drafter_imports_and_any_use_raises(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SHIMS), *filter(None, [env.get("PYTHONPATH")])])
    env["VLLM_CACHE_ROOT"] = str(tmp_path / "vllm-cache")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    import json

    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["origin"] == str(SHIMS / "torchvision" / "__init__.py")
    assert facts["drafter"] == "Qwen3_5MoeMTP"
    # A module on the path is all transformers' check asks: it takes its torchvision branches,
    # as on a GPU image, and binds the shim's placeholders.
    assert facts["transformers_sees_torchvision"] is True
    for key, kind in (("call", "RuntimeError"), ("attribute", "RuntimeError")):
        assert facts[key][0] == kind and "tests/shims/torchvision" in facts[key][1], facts[key]
    assert facts["missing"][0] == "AttributeError"
    assert "torchvision.transforms.v2.functional.resize" in facts["missing"][1]
    assert "tests/shims/torchvision" in facts["missing"][1]
    # A Gemma 4 target's image and video processors import (their annotations read the enum).
    assert facts["v2_enum"] is True
    assert facts["gemma4_processors"] == [
        "transformers.models.gemma4.image_processing_gemma4",
        "transformers.models.gemma4.video_processing_gemma4",
    ]
