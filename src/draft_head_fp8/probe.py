"""Inside one engine process: run vLLM once on a target + MTP assistant and report what the
workers serve, as JSON. The parent side (environment, subprocess, progress) is ``harness``.

One engine per process: vLLM loads its plugins once per process, and the plugin reads the flag
then, so a flag-off and a flag-on run need two processes.

What the workers serve is observed with the receipt capture itself (``make_runtime_receipt``,
phase ``observed``), so the flag-off run is described in the same words as the archived
receipt of the flag-on run. The worker side is a ``worker_extension_cls`` called by name through
``LLM.collective_rpc``: nothing is pickled between processes.
"""

from __future__ import annotations

import argparse
import json
import os
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
OBSERVED = "observed"


def _runner(worker: Any) -> Any:
    return worker.model_runner


def _decision(drafter: Any) -> Any:
    """The plugin's decision for this head, or, for a stock drafter, what the policy says."""
    decision = getattr(drafter, "head_decision", None)
    if decision is not None:
        return decision
    from draft_head_fp8.policy import eligibility, env_enabled

    head = drafter.lm_head
    return eligibility(
        layer=head,
        quant_config=getattr(drafter, "quant_config", None),
        role="draft",
        prefix=getattr(head, "prefix", "lm_head"),
        enabled=env_enabled(),
        ordered_embeddings=bool(getattr(drafter.config, "use_ordered_embeddings", False)),
        tie_word_embeddings=bool(getattr(drafter.config, "tie_word_embeddings", True)),
    )


def observe(worker: Any) -> dict:
    """What this worker's models look like now: a receipt of the draft head as it serves, the
    target embedding's hash, and whether the plugin touched vLLM at all."""
    from torch.nn.modules.module import _global_module_registration_hooks
    from vllm import ModelRegistry

    from draft_head_fp8.evidence.receipt_v3 import receipt_for_head
    from draft_head_fp8.fp8 import tensor_sha256

    runner = _runner(worker)
    target = runner.model
    drafter = runner.drafter.model
    get_language_model = getattr(target, "get_language_model", None)
    language_model = get_language_model() if callable(get_language_model) else target
    entry = ModelRegistry.models.get("Gemma4MTPModel")
    # Listed before anything below imports more of the package: the flag-off run must show none.
    plugin_modules = sorted(m for m in sys.modules if m.startswith("draft_head_fp8.vllm_plugin."))
    receipt = receipt_for_head(
        head=drafter.lm_head,
        draft_model=drafter,
        target_model=target,
        decision=_decision(drafter),
        phase=OBSERVED,
    )
    return {
        "receipt": receipt,
        "target_embed_sha256": tensor_sha256(language_model.model.embed_tokens.weight),
        # With the flag off these must show that the plugin did nothing at all.
        "plugin_modules": plugin_modules,
        "module_registration_hooks": len(_global_module_registration_hooks),
        "registry_entry": None
        if entry is None
        else f"{getattr(entry, 'module_name', '?')}:{getattr(entry, 'class_name', repr(entry))}",
        "drafter_class": f"{type(drafter).__module__}.{type(drafter).__name__}",
    }


def time_draft_head(worker: Any) -> bool:
    """Time every draft logits call (the head and its logits processor) where it runs, in the
    worker: what a user compares between the BF16 and the FP8 head."""
    import torch

    drafter = _runner(worker).drafter.model
    served = drafter.compute_logits
    seconds: list[float] = []

    def compute_logits(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        cuda = hidden_states.is_cuda
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        logits = served(hidden_states, *args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
        return logits

    drafter.compute_logits = compute_logits  # instance attribute: this process's probe only
    drafter._head_seconds = seconds
    return True


def read_head_timing(worker: Any) -> dict | None:
    seconds = getattr(_runner(worker).drafter.model, "_head_seconds", None)
    if not seconds:
        return None
    ordered = sorted(seconds)
    return {
        "calls": len(ordered),
        "median_s": ordered[len(ordered) // 2],
        "mean_s": sum(ordered) / len(ordered),
        "total_s": sum(ordered),
    }


def watch_draft_agreement(worker: Any, assistant_dir: str) -> bool:
    """Next to every draft logits call, compute the BF16 head's logits from the checkpoint's own
    embedding, as vLLM's BF16 head and logits processor do (float32 sums rounded to BF16, the
    soft cap in BF16), and count how often the two draft tokens agree."""
    import torch
    from safetensors import safe_open

    from draft_head_fp8.checkpoint import EMBED_TENSOR, find_tensor

    drafter = _runner(worker).drafter.model
    path, _, _ = find_tensor(assistant_dir)
    with safe_open(path, framework="pt") as f:
        bf16_head = f.get_tensor(EMBED_TENSOR).to(torch.bfloat16)
    soft_cap = getattr(drafter.logits_processor, "soft_cap", None)
    rows = max(1, (64 << 20) // (4 * bf16_head.shape[1]))  # 64 MiB of float32 rows at a time

    def bf16_logits(hidden: Any) -> Any:
        h = hidden.float().cpu()
        return torch.cat(
            [h @ bf16_head[i : i + rows].float().t() for i in range(0, len(bf16_head), rows)], -1
        )

    served = drafter.compute_logits
    stats = {"steps": 0, "agree": 0}

    def compute_logits(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        logits = served(hidden_states, *args, **kwargs)
        if logits is not None:
            reference = bf16_logits(hidden_states).to(logits.dtype)
            if soft_cap is not None:
                reference = torch.tanh(reference / soft_cap) * soft_cap
            served_logits = logits.cpu()
            vocab = min(reference.shape[-1], served_logits.shape[-1])
            same = served_logits[..., :vocab].argmax(-1) == reference[..., :vocab].argmax(-1)
            stats["steps"] += int(same.numel())
            stats["agree"] += int(same.sum())
        return logits

    drafter.compute_logits = compute_logits
    drafter._draft_agreement = stats
    return True


def read_draft_agreement(worker: Any) -> dict | None:
    return getattr(_runner(worker).drafter.model, "_draft_agreement", None)


def peak_device_bytes(worker: Any) -> int | None:
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


class WorkerProbe:
    """Mixed into vLLM's worker class (``worker_extension_cls``); ``self`` is the worker."""

    def probe_observe(self) -> dict:
        return observe(self)

    def probe_watch_draft_agreement(self, assistant_dir: str) -> bool:
        return watch_draft_agreement(self, assistant_dir)

    def probe_read_draft_agreement(self) -> dict | None:
        return read_draft_agreement(self)

    def probe_time_draft_head(self) -> bool:
        return time_draft_head(self)

    def probe_read_head_timing(self) -> dict | None:
        return read_head_timing(self)

    def probe_peak_device_bytes(self) -> int | None:
        return peak_device_bytes(self)


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


def run(
    target: str,
    assistant: str,
    prompts: list[str] | list[list[int]],
    *,
    max_tokens: int = 24,
    speculative_tokens: int = 2,
    draft_agreement: bool = False,
    ignore_eos: bool = False,
    tensor_parallel_size: int = 1,
    max_model_len: int = 256,
    dtype: str = "bfloat16",
    kv_cache_memory_bytes: int | None = 64 << 20,
    enforce_eager: bool = True,
) -> dict:
    """``prompts``: texts, or token id lists (given to vLLM as ``TokensPrompt``)."""
    import resource

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    options = {} if not kv_cache_memory_bytes else {"kv_cache_memory_bytes": kv_cache_memory_bytes}
    llm = LLM(
        model=target,
        speculative_config={
            "method": "mtp",
            "model": assistant,
            "num_speculative_tokens": speculative_tokens,
        },
        tensor_parallel_size=tensor_parallel_size,
        # One process for one rank (fast, stable on small CPUs); real worker processes for more.
        distributed_executor_backend="uni" if tensor_parallel_size == 1 else "mp",
        enforce_eager=enforce_eager,
        max_model_len=max_model_len,
        dtype=dtype,
        seed=0,
        disable_log_stats=False,
        worker_extension_cls="draft_head_fp8.probe.WorkerProbe",
        **options,
    )
    init_seconds = time.perf_counter() - started
    after_start = llm.collective_rpc("probe_observe")
    llm.collective_rpc("probe_time_draft_head")
    if draft_agreement:
        llm.collective_rpc("probe_watch_draft_agreement", args=(assistant,))
    started = time.perf_counter()
    inputs = [p if isinstance(p, str) else TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    outputs = llm.generate(inputs, params, use_tqdm=False)
    generate_seconds = time.perf_counter() - started
    after_generate = llm.collective_rpc("probe_observe")
    agreement = llm.collective_rpc("probe_read_draft_agreement")[0] if draft_agreement else None
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    return {
        "flag": os.environ.get("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"),
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
        "seconds": {"init": round(init_seconds, 3), "generate": round(generate_seconds, 3)},
        # This process's high-water mark: the whole engine when it runs in one process (TP 1).
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_device_bytes": llm.collective_rpc("probe_peak_device_bytes"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m draft_head_fp8.probe",
        description="Run vLLM once on a target + Gemma 4 MTP assistant; write what the workers "
        "served as JSON. Started by draft_head_fp8.harness.",
    )
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", required=True)
    parser.add_argument(
        "--prompt", action="append", help="repeatable; default: a few fixed prompts"
    )
    parser.add_argument(
        "--prompt-token-ids",
        metavar="FILE",
        help="JSON list of token id lists, instead of --prompt",
    )
    parser.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--speculative-tokens", type=int, default=2)
    parser.add_argument("--draft-agreement", action="store_true")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--kv-cache-memory-bytes", type=int, default=64 << 20, help="0: let vLLM size it"
    )
    parser.add_argument("--no-eager", action="store_true", help="let vLLM compile / graph")
    parser.add_argument("--out", required=True, help="where to write the JSON facts")
    args = parser.parse_args(argv)
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
        enforce_eager=not args.no_eager,
    )
    Path(args.out).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
