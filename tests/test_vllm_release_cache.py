"""tools/vllm_releases.py's cache, without the network: an unpacked release is reused as is, a
cached wheel is unpacked without its compiled libraries, a crashed unpack is redone, and a wheel
that cannot be had is one named error."""

from __future__ import annotations

import zipfile

import pytest

from tools import vllm_releases


def _fake_wheel(cache, version="9.9.0"):
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "__version__ = '9.9.0'\n")
        archive.writestr("vllm/_C.abi3.so", b"\x7fELF cuda")
        archive.writestr(f"vllm-{version}.dist-info/METADATA", "Name: vllm\n")
    return wheel


def test_a_cached_wheel_is_unpacked_once_without_its_compiled_libraries(tmp_path):
    _fake_wheel(tmp_path)
    where = vllm_releases.ensure("9.9.0", tmp_path)
    assert where == vllm_releases.unpacked_dir("9.9.0", tmp_path)
    assert (where / "vllm" / "__init__.py").is_file()
    assert not (where / "vllm" / "_C.abi3.so").exists()
    assert vllm_releases.is_unpacked("9.9.0", tmp_path)
    (where / "vllm" / "__init__.py").write_text("kept\n")
    assert vllm_releases.ensure("9.9.0", tmp_path) == where  # reused, not unpacked again
    assert (where / "vllm" / "__init__.py").read_text() == "kept\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_an_unpack_that_never_finished_is_redone(tmp_path):
    _fake_wheel(tmp_path)
    half = vllm_releases.unpacked_dir("9.9.0", tmp_path)
    (half / "vllm").mkdir(parents=True)  # no DONE marker: a crash mid-unpack
    vllm_releases.ensure("9.9.0", tmp_path)
    assert (half / "vllm" / "__init__.py").is_file() and vllm_releases.is_unpacked(
        "9.9.0", tmp_path
    )


def test_a_wheel_that_cannot_be_had_is_one_named_error(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1)
    )  # pip failing, as offline
    with pytest.raises(vllm_releases.ReleaseUnavailable, match="could not download the vllm 9.8.0"):
        vllm_releases.ensure("9.8.0", tmp_path)
