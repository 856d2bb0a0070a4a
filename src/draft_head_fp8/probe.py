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

    from draft_head_fp8.evidence.receipt import make_runtime_receipt
    from draft_head_fp8.fp8 import tensor_sha256

    runner = _runner(worker)
    target = runner.model
    drafter = runner.drafter.model
    get_language_model = getattr(target, "get_language_model", None)
    language_model = get_language_model() if callable(get_language_model) else target
    entry = ModelRegistry.models.get("Gemma4MTPModel")
    receipt = make_runtime_receipt(
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
        "plugin_modules": sorted(
            m for m in sys.modules if m.startswith("draft_head_fp8.vllm_plugin.")
        ),
        "module_registration_hooks": len(_global_module_registration_hooks),
        "registry_entry": None
        if entry is None
        else f"{getattr(entry, 'module_name', '?')}:{getattr(entry, 'class_name', repr(entry))}",
        "drafter_class": f"{type(drafter).__module__}.{type(drafter).__name__}",
    }


def watch_draft_agreement(worker: Any, assistant_dir: str) -> bool:
    """Next to every draft logits call, compute the BF16 head's logits from the checkpoint's own
    embedding and count how often the two argmaxes agree (the draft tokens the head changed)."""
    import torch
    from safetensors import safe_open

    from draft_head_fp8.checkpoint import EMBED_TENSOR, find_tensor

    drafter = _runner(worker).drafter.model
    path, _, _ = find_tensor(assistant_dir)
    with safe_open(path, framework="pt") as f:
        bf16_head = f.get_tensor(EMBED_TENSOR).to(torch.bfloat16)
    served = drafter.compute_logits
    stats = {"steps": 0, "agree": 0}

    def compute_logits(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        logits = served(hidden_states, *args, **kwargs)
        if logits is not None:
            reference = hidden_states.to(bf16_head.dtype) @ bf16_head.t()
            vocab = min(reference.shape[-1], logits.shape[-1])
            same = logits[..., :vocab].argmax(-1) == reference[..., :vocab].argmax(-1)
            stats["steps"] += int(same.numel())
            stats["agree"] += int(same.sum())
        return logits

    drafter.compute_logits = compute_logits  # instance attribute: this process's probe only
    drafter._draft_agreement = stats
    return True


def read_draft_agreement(worker: Any) -> dict | None:
    return getattr(_runner(worker).drafter.model, "_draft_agreement", None)


class WorkerProbe:
    """Mixed into vLLM's worker class (``worker_extension_cls``); ``self`` is the worker."""

    def probe_observe(self) -> dict:
        return observe(self)

    def probe_watch_draft_agreement(self, assistant_dir: str) -> bool:
        return watch_draft_agreement(self, assistant_dir)

    def probe_read_draft_agreement(self) -> dict | None:
        return read_draft_agreement(self)


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
) -> dict:
    """``prompts``: texts, or token id lists (given to vLLM as ``TokensPrompt``)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = LLM(
        model=target,
        speculative_config={
            "method": "mtp",
            "model": assistant,
            "num_speculative_tokens": speculative_tokens,
        },
        distributed_executor_backend="uni",
        kv_cache_memory_bytes=64 << 20,
        enforce_eager=True,
        max_model_len=256,
        dtype="bfloat16",
        seed=0,
        disable_log_stats=False,
        worker_extension_cls="draft_head_fp8.probe.WorkerProbe",
    )
    init_seconds = time.perf_counter() - started
    after_start = llm.collective_rpc("probe_observe")[0]
    if draft_agreement:
        llm.collective_rpc("probe_watch_draft_agreement", args=(assistant,))
    started = time.perf_counter()
    inputs = [p if isinstance(p, str) else TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
    outputs = llm.generate(inputs, params, use_tqdm=False)
    generate_seconds = time.perf_counter() - started
    after_generate = llm.collective_rpc("probe_observe")[0]
    agreement = llm.collective_rpc("probe_read_draft_agreement")[0] if draft_agreement else None
    return {
        "flag": os.environ.get("VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"),
        "prompts": prompts,
        "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
        "texts": [o.outputs[0].text for o in outputs],
        "spec_decode": spec_metrics(llm),
        "draft_agreement": agreement,
        "after_start": after_start,
        "after_generate": after_generate,
        "seconds": {"init": round(init_seconds, 3), "generate": round(generate_seconds, 3)},
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
    )
    Path(args.out).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
