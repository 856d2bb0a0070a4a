"""Inside one engine process: run vLLM once on a target and its drafter and report what the
workers serve, as JSON. The parent side (environment, subprocess, progress) is ``harness``.

One engine per process: vLLM loads its plugins once per process, and the plugin reads the flag
then, so a flag-off and a flag-on run need two processes. The worker side is ``worker_probe``,
a ``worker_extension_cls`` called by name through ``LLM.collective_rpc``: nothing is pickled
between processes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_PROMPTS = [
    "The quick brown fox",
    "def main():",
    "Return a new list containing",
    "This module provides",
]


def spec_metrics(llm: Any) -> dict:
    """vLLM's own speculative-decoding counters, and the rates people quote from them."""
    counters: dict[str, Any] = {}
    for metric in llm.get_metrics():
        if not metric.name.startswith("vllm:spec_decode_num_"):
            continue
        key = metric.name.removeprefix("vllm:spec_decode_")
        if hasattr(metric, "values"):  # per draft position
            counters[key] = [int(v) for v in metric.values]
        elif hasattr(metric, "value"):
            counters[key] = int(metric.value)
    drafts = counters.get("num_drafts", 0)
    draft_tokens = counters.get("num_draft_tokens", 0)
    accepted = counters.get("num_accepted_tokens", 0)
    per_position = counters.get("num_accepted_tokens_per_pos")
    return {
        **counters,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        # vLLM's convention: the bonus token plus the accepted draft tokens, per draft.
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_per_position": [p / drafts for p in per_position]
        if per_position and drafts
        else None,
    }


def _inputs(prompts: list) -> list:
    """Texts as they are; token id lists as vLLM's ``TokensPrompt``."""
    from vllm.inputs import TokensPrompt

    return [p if isinstance(p, str) else TokensPrompt(prompt_token_ids=list(p)) for p in prompts]


def _batch_sweep(llm: Any, prompts: list, params: Any, sizes: tuple[int, ...]) -> list[dict]:
    """Generate once at each batch size (the prompts repeated to fill it): the draft head is then
    called with that many rows, which ``read_head_timing`` tells apart."""
    sweep = []
    for size in sizes:
        inputs = _inputs([prompts[i % len(prompts)] for i in range(size)])
        started = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        seconds = time.perf_counter() - started
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        sweep.append({"batch": size, "seconds": round(seconds, 4), "generated_tokens": tokens})
    return sweep


# The engine ``run`` starts unless told otherwise: small and eager, as the tests run it on a CPU.
ENGINE_DEFAULTS: dict[str, Any] = {
    "speculative_tokens": 2,
    "tensor_parallel_size": 1,
    "max_model_len": 256,
    "dtype": "bfloat16",
    "kv_cache_memory_bytes": 64 << 20,
    "gpu_memory_utilization": None,
    "enforce_eager": True,
}


def _start_engine(
    target: str,
    assistant: str,
    *,
    speculative_tokens: int,
    tensor_parallel_size: int,
    max_model_len: int,
    dtype: str,
    kv_cache_memory_bytes: int | None,
    gpu_memory_utilization: float | None,
    enforce_eager: bool,
    speculative_method: str | None = None,
    pipeline_parallel_size: int = 1,
    speculative_options: dict | None = None,
    engine_options: dict | None = None,
) -> tuple[Any, float]:
    """vLLM on the target and its drafter, with the probe's worker extension; and the seconds
    the engine took to start."""
    from vllm import LLM

    family, options = _family_options(assistant, speculative_method)
    if kv_cache_memory_bytes:
        options["kv_cache_memory_bytes"] = kv_cache_memory_bytes
    if gpu_memory_utilization is not None:
        options["gpu_memory_utilization"] = gpu_memory_utilization
    started = time.perf_counter()
    llm = LLM(
        model=target,
        speculative_config={
            "method": speculative_method or family.speculative_method,
            "model": assistant,
            "num_speculative_tokens": speculative_tokens,
            **(speculative_options or {}),
        },
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        # One process for one rank (fast, stable on small CPUs); real worker processes for more.
        distributed_executor_backend="uni"
        if tensor_parallel_size * pipeline_parallel_size == 1
        else "mp",
        enforce_eager=enforce_eager,
        max_model_len=max_model_len,
        dtype=dtype,
        seed=0,
        disable_log_stats=False,
        worker_extension_cls="draft_head_fp8.worker_probe.WorkerProbe",
        **options,
        **(engine_options or {}),
    )
    return llm, time.perf_counter() - started


def _family_options(assistant: str, speculative_method: str | None) -> tuple[Any, dict]:
    """The drafter's family (None for a drafter no family knows, named by its vLLM method) and
    what vLLM needs to run it on a CPU."""
    from vllm.platforms import current_platform

    from draft_head_fp8 import families
    from draft_head_fp8.checkpoint import read_config

    family = families.for_config(read_config(assistant), Path(assistant))
    if family is None and speculative_method is None:
        raise SystemExit(
            f"{assistant}: not a drafter of any family this package knows "
            "(--speculative-method names vLLM's method for one it does not)"
        )
    cpu = family is not None and current_platform.is_cpu()
    return family, dict(family.cpu_engine_options) if cpu else {}


def run(
    target: str,
    assistant: str,
    prompts: list[str] | list[list[int]],
    *,
    max_tokens: int = 24,
    draft_agreement: bool = False,
    ignore_eos: bool = False,
    batch_sizes: tuple[int, ...] = (),
    reload_weights: bool = False,
    weight_updates: list[dict] | None = None,
    **engine: Any,
) -> dict:
    """``prompts``: texts or token id lists; ``weight_updates``: after the prompts, each update
    and the prompts again (``probe_updates``); ``reload_weights``: last, try vLLM's reload;
    ``engine``: ``_start_engine``'s options (its defaults: the tests' small CPU engine)."""
    from vllm import SamplingParams

    engine = {**ENGINE_DEFAULTS, **engine}
    llm, init_seconds = _start_engine(target, assistant, **engine)
    after_start = llm.collective_rpc("probe_observe")
    llm.collective_rpc("probe_time_draft_head")
    if draft_agreement:
        llm.collective_rpc("probe_watch_draft_agreement", args=(target, assistant))
    started = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    outputs = llm.generate(_inputs(prompts), params, use_tqdm=False)
    seconds = {"init": round(init_seconds, 3), "generate": round(time.perf_counter() - started, 3)}
    sweep = _batch_sweep(llm, prompts, params, batch_sizes)
    after_generate = llm.collective_rpc("probe_observe")
    agreement = llm.collective_rpc("probe_read_draft_agreement")[0] if draft_agreement else None
    facts = _facts(
        llm,
        prompts,
        outputs,
        agreement=agreement,
        observed=(after_start, after_generate),
        tensor_parallel_size=engine["tensor_parallel_size"],
        sweep=sweep,
        seconds=seconds,
    )
    # After the facts of the prompts (vLLM's counters count from the start: read them first).
    if weight_updates:
        from draft_head_fp8.probe_updates import run_steps

        facts["weight_updates"] = run_steps(
            llm, weight_updates, _inputs(prompts), params, draft_agreement, spec_metrics
        )
    if reload_weights:
        facts["reload_weights"] = _reload_weights(llm)
    _shut_down(llm)
    return facts


def _shut_down(llm: Any) -> None:
    """The engine shut down as a server shuts it down (its workers' ``shutdown``), not left to
    the garbage collector: what a worker does at the end (the plugin's end-of-serving record)
    happens before the facts are written, in a process of one run or of many."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and callable(getattr(core, "shutdown", None)):
        core.shutdown()


def _reload_weights(llm: Any) -> dict:
    """vLLM's ``reload_weights`` on every worker: whether it raised, and what they serve after."""
    try:
        llm.collective_rpc("reload_weights")
        error = None
    except Exception as exc:  # what vLLM hands back from the workers
        error = f"{type(exc).__name__}: {exc}"
    return {"error": error, "after": llm.collective_rpc("probe_observe")}


def _facts(
    llm: Any,
    prompts: list,
    outputs: list,
    *,
    agreement: dict | None,
    observed: tuple[list, list],
    tensor_parallel_size: int,
    sweep: list[dict],
    seconds: dict,
    reload: dict | None = None,
) -> dict:
    """What the probe writes: the run's tokens, vLLM's counters, and what the workers served
    after start-up and after generating (``observed``, every rank's)."""
    import resource

    import vllm

    from draft_head_fp8 import settings

    after_start, after_generate = observed
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    return {
        "flag": settings.flag_as_set(),
        # The vLLM that served (what imported, whatever distribution metadata says).
        "vllm_version": vllm.__version__,
        "prompts": prompts,
        "token_ids": token_ids,
        "texts": [o.outputs[0].text for o in outputs],
        "spec_decode": spec_metrics(llm),
        "draft_agreement": agreement,
        "draft_head_timing": llm.collective_rpc("probe_read_head_timing")[0],
        # Rank 0's view, and every rank's (one entry at TP 1).
        "after_start": after_start[0],
        "after_generate": after_generate[0],
        "after_start_ranks": after_start,
        "after_generate_ranks": after_generate,
        "tensor_parallel_size": tensor_parallel_size,
        "generated_tokens": sum(len(ids) for ids in token_ids),
        "batch_sweep": sweep,
        "seconds": seconds,
        # This process's high-water mark: the whole engine when it runs in one process (TP 1).
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_device_bytes": llm.collective_rpc("probe_peak_device_bytes"),
        "reload_weights": reload,
    }


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-model-len", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument(
        "--kv-cache-memory-bytes", type=int, default=64 << 20, help="0: let vLLM size it"
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--no-eager", action="store_true", help="let vLLM compile / graph")
    p.add_argument(
        "--speculative-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more speculative_config key (VALUE read as JSON, else as a string); repeatable",
    )
    p.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more LLM(...) option, e.g. enable_sleep_mode=true (VALUE read as JSON, else "
        "as a string); repeatable",
    )
    p.add_argument(
        "--weight-updates",
        metavar="FILE",
        help="JSON list of weight updates to make after the prompts, each followed by the prompts "
        "again (draft_head_fp8.probe_updates)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m draft_head_fp8.probe",
        description="Run vLLM once on a target and its drafter; write what the workers served as "
        "JSON. Started by draft_head_fp8.harness.",
    )
    p.add_argument("--target", required=True)
    p.add_argument("--assistant", required=True)
    p.add_argument("--prompt", action="append", help="repeatable; default: a few fixed prompts")
    p.add_argument(
        "--prompt-token-ids",
        metavar="FILE",
        help="JSON list of token id lists, instead of --prompt",
    )
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--speculative-tokens", type=int, default=2)
    p.add_argument(
        "--speculative-method",
        default=None,
        help="vLLM's method (e.g. eagle3) for a drafter no family knows; default: the family's",
    )
    p.add_argument("--draft-agreement", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument(
        "--pipeline-parallel-size", type=int, default=1, help="the flag refuses more than 1"
    )
    _engine_arguments(p)
    p.add_argument(
        "--batch-sizes",
        type=int,
        nargs="*",
        default=(),
        metavar="B",
        help="after the prompts, generate once more at each batch size B (prompts repeated)",
    )
    p.add_argument(
        "--reload-weights",
        action="store_true",
        help="last, call vLLM's reload_weights on the workers and record the answer",
    )
    p.add_argument("--out", required=True, help="where to write the JSON facts")
    return p


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--speculative-option {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    prompts = json.loads(Path(args.prompt_token_ids).read_text()) if args.prompt_token_ids else None
    facts = run(
        args.target,
        args.assistant,
        prompts or args.prompt or DEFAULT_PROMPTS,
        max_tokens=args.max_tokens,
        speculative_tokens=args.speculative_tokens,
        draft_agreement=args.draft_agreement,
        ignore_eos=args.ignore_eos,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=not args.no_eager,
        batch_sizes=tuple(args.batch_sizes),
        speculative_method=args.speculative_method,
        pipeline_parallel_size=args.pipeline_parallel_size,
        reload_weights=args.reload_weights,
        speculative_options=dict(_option(o) for o in args.speculative_option),
        engine_options=dict(_option(o) for o in args.engine_option),
        weight_updates=json.loads(Path(args.weight_updates).read_text())
        if args.weight_updates
        else None,
    )
    Path(args.out).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
