"""``runners``: which of vLLM's model runners a worker has, where its drafter is, what a boot
records of it, and the runner found on the call stack at the share; and the refusal of engines
whose weights can change after the proof. Pure: stand-in runners (the real ones are proven on the
engine, both runners, in test_model_runner_v2.py and test_shared_head_families.py)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from draft_head_fp8.runners import MRV2, V1, describe, drafter_of, find_on_stack, runner_of


class Gemma4Speculator:
    def __init__(self, model):
        self.model = model


class CPUModelRunner:  # MRv2's shape: the speculator holds the drafter
    def __init__(self, speculator):
        self.speculator = speculator

    def load_model(self, share):
        return share()


class GPUModelRunner:  # V1's shape: the proposer holds the drafter
    def __init__(self, drafter):
        self.drafter = drafter


def test_each_runner_is_told_by_where_it_keeps_its_drafter():
    draft = object()
    mrv2, v1 = CPUModelRunner(Gemma4Speculator(draft)), GPUModelRunner(Gemma4Speculator(draft))
    assert runner_of(mrv2) is MRV2 and runner_of(v1) is V1
    assert drafter_of(mrv2) is draft and drafter_of(v1) is draft
    assert describe(mrv2) == {
        "name": "mrv2",
        "model_runner": f"{__name__}.CPUModelRunner",
        "speculator": f"{__name__}.Gemma4Speculator",
    }


def test_an_unknown_runner_or_one_without_a_drafter_is_said_plainly():
    with pytest.raises(RuntimeError, match="neither of vLLM's model runners"):
        runner_of(SimpleNamespace(model=object()))
    with pytest.raises(RuntimeError, match="serves no draft model"):
        drafter_of(CPUModelRunner(None))
    assert describe(CPUModelRunner(None))["speculator"] is None


def test_the_runner_whose_load_performs_the_share_is_found_on_the_stack():
    runner = CPUModelRunner(Gemma4Speculator(object()))
    assert runner.load_model(lambda: find_on_stack(sys._getframe())) is runner
    # Outside any runner's call (a drafter built by hand) nothing is found.
    assert find_on_stack(sys._getframe()) is None


def test_the_worker_that_loads_the_model_is_found_below_the_share():
    """Where weight updates are announced (its transfer session, wake_up): found as the model
    runner is, from the stack, never from a global."""
    from draft_head_fp8.runners import find_worker_on_stack

    class CPUWorker:  # named like vLLM's: what the stack walk recognises, with its runner
        def __init__(self):
            self.model_runner = object()

        def load_model(self):
            return find_worker_on_stack(sys._getframe())

    worker = CPUWorker()
    assert worker.load_model() is worker
    assert find_worker_on_stack(sys._getframe()) is None
