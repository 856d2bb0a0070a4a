"""The probe's pure parts, without an engine: the facts it writes (keys, in order), the prompts it
hands vLLM, its counters and its command line. The engine runs in tests/test_engine.py."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from draft_head_fp8 import probe

FACT_KEYS = [
    "flag",
    "vllm_version",
    "prompts",
    "token_ids",
    "texts",
    "spec_decode",
    "draft_agreement",
    "draft_head_timing",
    "after_start",
    "after_generate",
    "after_start_ranks",
    "after_generate_ranks",
    "tensor_parallel_size",
    "generated_tokens",
    "batch_sweep",
    "seconds",
    "peak_rss_bytes",
    "peak_device_bytes",
    "reload_weights",
]


class FakeLLM:
    """Answers the probe's calls the way vLLM's LLM does, with fixed values."""

    def __init__(self):
        self.generated = []

    def collective_rpc(self, name, args=()):
        return {"probe_read_head_timing": [{"calls": 3}], "probe_peak_device_bytes": [0, 0]}[name]

    def get_metrics(self):
        return [
            SimpleNamespace(name="vllm:spec_decode_num_drafts", value=4),
            SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=8),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=6),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=[4, 2]),
            SimpleNamespace(name="vllm:num_requests_running", value=1),
        ]

    def generate(self, inputs, params, use_tqdm):
        self.generated.append(inputs)
        return [output([7, 8], "xy") for _ in inputs]


def output(token_ids, text):
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, text=text)])


def test_facts_keep_their_keys_and_order(monkeypatch):
    monkeypatch.setenv("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8", " 1")
    facts = probe._facts(
        FakeLLM(),
        ["a", "b"],
        [output([1, 2], "ab"), output([3], "c")],
        agreement=None,
        observed=([{"rank": 0}, {"rank": 1}], [{"rank": 0, "after": 1}, {"rank": 1}]),
        tensor_parallel_size=2,
        sweep=[],
        seconds={"init": 1.0, "generate": 2.0},
    )
    assert list(facts) == FACT_KEYS
    assert facts["flag"] == " 1"  # recorded as set, not as understood
    assert facts["token_ids"] == [[1, 2], [3]] and facts["texts"] == ["ab", "c"]
    assert facts["generated_tokens"] == 3 and facts["tensor_parallel_size"] == 2
    assert facts["after_start"] == {"rank": 0} and facts["after_generate"]["after"] == 1
    assert facts["draft_head_timing"] == {"calls": 3} and facts["peak_device_bytes"] == [0, 0]


def test_an_unset_flag_is_recorded_as_null(monkeypatch):
    monkeypatch.delenv("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8", raising=False)
    facts = probe._facts(
        FakeLLM(), [], [], agreement=None, observed=([{}], [{}]),
        tensor_parallel_size=1, sweep=[], seconds={},
    )  # fmt: skip
    assert facts["flag"] is None


def test_spec_metrics_are_vllms_counters_and_their_rates():
    metrics = probe.spec_metrics(FakeLLM())
    assert metrics == {
        "num_drafts": 4,
        "num_draft_tokens": 8,
        "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [4, 2],
        "acceptance_rate": 0.75,
        "mean_acceptance_length": 2.5,
        "acceptance_per_position": [1.0, 0.5],
    }


def test_batch_sweep_repeats_the_prompts_and_passes_token_ids_as_tokens_prompts():
    llm = FakeLLM()
    sweep = probe._batch_sweep(llm, ["text", [5, 6]], None, (1, 3))
    assert [row["batch"] for row in sweep] == [1, 3]
    assert [row["generated_tokens"] for row in sweep] == [2, 6]
    assert llm.generated[1] == ["text", {"prompt_token_ids": [5, 6]}, "text"]


def test_the_command_line_defaults_are_runs():
    defaults = vars(probe._parser().parse_args(["--target", "t", "--assistant", "a", "--out", "o"]))
    declared = {
        name: parameter.default
        for name, parameter in inspect.signature(probe.run).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    for name, default in {**declared, **probe.ENGINE_DEFAULTS}.items():
        if name == "enforce_eager":
            assert defaults["no_eager"] is (not default)
        else:
            assert defaults[name] == default, name
