"""The draft-head-fp8 command as users run it: a real subprocess, real files, exit codes, stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import MACHINE, W8A16

FIXTURES = Path(__file__).parent / "fixtures" / "receipts"
VALID = FIXTURES / "cpu-tiny-post_share.json"
FAIL_CASES = sorted(FIXTURES.glob("*_fail.json"))


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "draft_head_fp8.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


# ------------------------------------------------------------------ check


def test_check_eligible_exits_0_where_this_cpu_serves_it(pairs):
    proc = cli("check", str(pairs["dense"].assistant), "--target", str(pairs["dense"].target))
    if W8A16:
        assert proc.returncode == 0, proc.stderr
        assert "verdict    eligible" in proc.stdout
        assert "0.25 MiB -> 0.13 MiB" in proc.stdout  # 64 x 2048 BF16 vs FP8 + scale
        assert "the W8A16 op: the packed FP8 head serves" in proc.stdout
    else:  # said before any engine starts: the start-up would refuse on this CPU
        assert proc.returncode == 3, proc.stderr
        assert "no FP8 draft head faster than the BF16 head on this CPU" in proc.stdout
    assert f"machine    {MACHINE.isa}" in proc.stdout


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("ordered", "ordered embeddings bypass LogitsProcessor.quant_method.apply"),
        (
            "untied",
            "untied draft embedding/head is not served: the FP8 copy is proven only for a head "
            "tied to its embedding or read from the target",
        ),
    ],
)
def test_check_refused_exits_3_with_the_exact_reason(pairs, kind, reason):
    proc = cli("check", str(pairs[kind].assistant), "--json")
    assert proc.returncode == 3
    report = json.loads(proc.stdout)
    assert report["eligible"] is False and report["reason"] == reason
    text = cli("check", str(pairs[kind].assistant))
    assert f"not eligible: {reason}" in text.stdout


def test_check_says_a_soft_capped_draft_is_refused(pairs, tmp_path):
    """What the engine refuses at construction (test_engine), said before it starts: the draft's
    final soft cap rounds the head's logits after the certified pick."""
    from draft_head_fp8.policy import soft_capped_logits

    assistant = tmp_path / "assistant"
    shutil.copytree(pairs["dense"].assistant, assistant)
    config = json.loads((assistant / "config.json").read_text())
    config["text_config"]["final_logit_softcapping"] = 30.0
    (assistant / "config.json").write_text(json.dumps(config))
    proc = cli("check", str(assistant), "--target", str(pairs["dense"].target))
    assert proc.returncode != 0
    assert soft_capped_logits(30.0) in " ".join(proc.stdout.split()), proc.stdout


def test_check_reads_no_weights(pairs, tmp_path):
    only_configs = tmp_path / "assistant"
    only_configs.mkdir()
    shutil.copy(pairs["dense"].assistant / "config.json", only_configs)
    proc = cli("check", str(only_configs))
    # Without vLLM's W8A16 op, the eligible head is refused for this CPU (exit 3), not for input.
    assert proc.returncode == (0 if W8A16 else 3), proc.stderr
    assert "verdict" in proc.stdout


def test_check_fp16_serving_is_predicted_to_fail_the_receipt(pairs, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    config = json.loads((pairs["dense"].target / "config.json").read_text())
    config["dtype"] = "float16"
    (target / "config.json").write_text(json.dumps(config))
    proc = cli("check", str(pairs["dense"].assistant), "--target", str(target), "--json")
    assert proc.returncode == 3
    report = json.loads(proc.stdout)
    # vLLM builds the draft in the target's dtype: head and hidden are both float16, and the
    # receipt's BF16 requirement is what refuses.
    assert report["policy_reason"] == "eligible"
    assert report["reason"].startswith("serving dtype float16 is not bfloat16")


def test_check_missing_folder_exits_2(tmp_path):
    proc = cli("check", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "no such folder" in one_line_error(proc)


def test_check_of_no_drafter_exits_2(pairs, tmp_path):
    llama = tmp_path / "llama"
    llama.mkdir()  # a Llama config with no EAGLE weights beside it: no drafter
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    proc = cli("check", str(llama))
    assert proc.returncode == 2
    assert "model_type 'llama' is no drafter draft-head-fp8 serves" in one_line_error(proc)
    proc = cli("check", str(pairs["dense"].target))  # a Gemma 4 target is not a drafter
    assert proc.returncode == 2


def test_check_unreadable_config_exits_2(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    proc = cli("check", str(tmp_path))
    assert proc.returncode == 2
    assert "cannot read it as JSON" in one_line_error(proc)


# ------------------------------------------------------------------ receipt


def test_receipt_validate_ok():
    proc = cli("receipt", "validate", str(VALID))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"{VALID}: OK"


@pytest.mark.parametrize("case", FAIL_CASES, ids=[p.stem for p in FAIL_CASES])
def test_receipt_validate_fail_fixtures(case):
    """Each *_fail fixture carries a .why note: the reason it must fail, then why it matters."""
    reason = case.with_suffix(".why").read_text().splitlines()[0]
    proc = cli("receipt", "validate", str(case))
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{case}: FAIL: ")
    assert reason in proc.stdout


def test_receipt_validate_many_files_one_bad_exits_1(tmp_path):
    missing = tmp_path / "missing.json"
    proc = cli("receipt", "validate", str(VALID), str(missing), "--json")
    assert proc.returncode == 1
    results = json.loads(proc.stdout)
    assert [r["ok"] for r in results] == [True, False]
    assert results[1]["reason"] == "no such file"


def test_receipt_show_prints_every_key_and_every_check():
    proc = cli("receipt", "show", str(VALID))
    assert proc.returncode == 0, proc.stderr
    receipt = json.loads(VALID.read_text())
    for key in receipt:
        assert key in proc.stdout
    from draft_head_fp8.evidence.checks import KEYS_LABEL, messages

    # Every check of the contract, by label: the key check, then the table's.
    for label in [KEYS_LABEL, *messages()]:
        assert f"pass  {label}\n" in proc.stdout
    assert proc.stdout.count("pass  ") == 1 + len(messages()) and "FAIL" not in proc.stdout


def test_receipt_show_marks_the_failing_check():
    proc = cli("receipt", "show", str(FIXTURES / "target-head-on-fp8_fail.json"))
    assert proc.returncode == 0
    assert (
        "FAIL  target head not FP8  (target LM head was routed to draft FP8 method)" in proc.stdout
    )


def test_receipt_show_not_json_exits_2():
    proc = cli("receipt", "show", str(FIXTURES / "not-json_fail.json"))
    assert proc.returncode == 2
    assert "not JSON" in one_line_error(proc)


# ------------------------------------------------------------------ tiny-models, archive, help


def test_tiny_models_writes_a_pair_and_never_overwrites(tmp_path):
    proc = cli("tiny-models", str(tmp_path / "pair"), "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    config = json.loads((tmp_path / "pair" / "assistant" / "config.json").read_text())
    assert config["model_type"] == "gemma4_assistant" and config["tie_word_embeddings"] is True
    before = (tmp_path / "pair" / "assistant" / "model.safetensors").read_bytes()
    again = cli("tiny-models", str(tmp_path / "pair"))
    assert again.returncode == 2
    assert "already holds files" in one_line_error(again)
    assert (tmp_path / "pair" / "assistant" / "model.safetensors").read_bytes() == before


def test_archive_empty_and_missing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = cli("archive", "list", "--root", str(empty), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    assert "no boots" in cli("archive", "list", "--root", str(empty)).stderr
    assert cli("archive", "verify", "--root", str(empty)).returncode == 0
    missing = cli("archive", "list", "--root", str(tmp_path / "nope"))
    assert missing.returncode == 2
    one_line_error(missing)


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["demo"],
        ["check"],
        ["receipt"],
        ["receipt", "validate"],
        ["receipt", "show"],
        ["tiny-models"],
        ["archive"],
        ["archive", "list"],
        ["archive", "show"],
        ["archive", "verify"],
        ["archive", "diff"],
        ["archive", "prune"],
    ],
)
def test_every_command_has_help_with_an_example(command):
    proc = cli(*command, "--help")
    assert proc.returncode == 0
    assert "example" in proc.stdout


def test_usage_errors_exit_2_in_one_line():
    proc = cli("receipt", "validate")
    assert proc.returncode == 2
    assert "the following arguments are required" in one_line_error(proc)
    proc = cli("frobnicate")
    assert proc.returncode == 2


def test_debug_shows_the_traceback(tmp_path):
    proc = cli("--debug", "check", str(tmp_path / "nope"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr


# ------------------------------------------------------------------ compare (fast paths)


def test_compare_refuses_an_unsafe_assistant_before_starting_any_engine(pairs):
    proc = cli("compare", "--target", str(pairs["dense"].target), "--assistant",
               str(pairs["untied"].assistant))  # fmt: skip
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines()[-1] == (
        "refused: untied draft embedding/head is not served: the FP8 copy is proven only for a "
        "head tied to its embedding or read from the target"
    )
    assert "[2/4]" not in proc.stderr  # no engine was started


@pytest.mark.parametrize("content", ["", "[1, 2]", "[not json"])
def test_compare_says_what_is_wrong_with_a_prompts_file(pairs, tmp_path, content):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(content)
    proc = cli("compare", "--target", str(pairs["dense"].target), "--assistant",
               str(pairs["dense"].assistant), "--prompts", str(prompts))  # fmt: skip
    assert proc.returncode == 2
    assert str(prompts) in one_line_error(proc)


def test_compare_help_teaches_with_an_example():
    proc = cli("compare", "--help")
    assert proc.returncode == 0
    assert "draft-head-fp8 compare --target" in proc.stdout and "exit status" in proc.stdout
    for option in ("--prompts", "--tensor-parallel-size", "--max-model-len", "--dtype", "--json"):
        assert option in proc.stdout


@pytest.mark.parametrize(
    "isa, says",
    [
        ("AVX512 + AVX512-BF16", ["0.55x", "AVX512-BF16 EPYC (no AMX), a CPU of this kind"]),
        ("AVX512 + AVX512-BF16 + AMX-TILE", ["0.60x", "AMX Xeon", "a CPU of this kind"]),
        ("AVX2", ["0.55x on a 2-core AVX512-BF16 EPYC", "0.60x on a 2-core AMX Xeon", "AVX2 kind"]),
    ],
)
def test_the_demos_real_size_figure_is_this_cpu_kinds_where_one_was_measured(isa, says):
    from draft_head_fp8.cli.report import real_size_note

    note = real_size_note(isa)
    assert all(part in note for part in says), note
    assert "not this one" in note and "docs/benchmarks.md" in note


def test_check_says_before_start_that_a_vllm_which_moved_a_wrapped_method_is_refused(
    pairs, tmp_path
):
    # vLLM 0.32's workers with wake_up renamed, first on the path: read from the sources, not run.
    import os

    from draft_head_fp8.vllm_plugin import vllm_source

    for module in ("gpu_worker", "cpu_worker"):
        moved = tmp_path / "vllm" / "v1" / "worker" / f"{module}.py"
        moved.parent.mkdir(parents=True, exist_ok=True)
        source = vllm_source.source_of(f"vllm.v1.worker.{module}").read_text()
        moved.write_text(source.replace("def wake_up(", "def wake_up_renamed("))
    pair = pairs["dense"]
    proc = subprocess.run(
        [sys.executable, "-m", "draft_head_fp8.cli", "check", str(pair.assistant), "--target",
         str(pair.target)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("refused ")]
    assert refused == [
        "refused    with VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1 start-up is refused: vLLM 0.32 has no "
        f"vllm.v1.worker.{module}:{cls}.wake_up (the worker's method the plugin wraps to prove "
        "the head again after sleep restores the weights)"
        for module, cls in (("cpu_worker", "CPUWorker"), ("gpu_worker", "Worker"))
    ]
    untouched = cli("check", str(pair.assistant), "--target", str(pair.target))
    assert not [line for line in untouched.stdout.splitlines() if line.startswith("refused ")]
