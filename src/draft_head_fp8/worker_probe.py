"""Inside each vLLM worker: what the models look like and what the draft head does, for
``probe`` (the engine process), reached by name through ``LLM.collective_rpc`` as the methods of
``WorkerProbe`` (vLLM's ``worker_extension_cls``).

What the workers serve is observed with the receipt capture itself (``receipt_for_head``,
phase ``observed``), so the flag-off run is described in the same words as the archived receipt
of the flag-on run.
"""

from __future__ import annotations

import sys
import time
from typing import Any

OBSERVED = "observed"


def _drafter(worker: Any) -> Any:
    """The draft model this worker serves, on either of vLLM's model runners."""
    from draft_head_fp8.runners import drafter_of

    return drafter_of(worker.model_runner)


def family_of(drafter: Any) -> Any:
    """The drafter's family: this package's class carries it; a stock one is looked up."""
    from draft_head_fp8 import families

    family = getattr(drafter, "family", None)
    if family is not None:
        return family
    found = families.by_drafter_class(type(drafter).__name__)
    if found is None:
        raise RuntimeError(f"{type(drafter).__name__} is no drafter of a family this package knows")
    return found[0]


def _decision(drafter: Any, family: Any, head: Any) -> Any:
    """The plugin's decision for this head, or, for a stock drafter, what the policy says."""
    decision = getattr(drafter, "head_decision", None)
    if decision is not None:
        return decision
    from draft_head_fp8.policy import eligibility, env_enabled

    return eligibility(
        layer=head,
        quant_config=getattr(drafter, "quant_config", None),
        role="draft",
        prefix=getattr(head, "prefix", "lm_head"),
        enabled=env_enabled(),
        **family.policy_inputs(drafter.config),
    )


# What a tensor with no data hashes to here: a reload vLLM fails partway can leave the target's
# tensors on the meta device (flag off too); the probe says so instead of failing to read them.
NO_DATA = "meta: no data"


def _sha256(tensor: Any) -> str:
    from draft_head_fp8.fp8 import tensor_sha256

    return NO_DATA if tensor.is_meta else tensor_sha256(tensor)


def observe(worker: Any) -> dict:
    """What this worker's models look like now: a receipt of the draft head as it serves, the
    hashes of the target's embedding and head, and whether the plugin touched vLLM at all."""
    from torch.nn.modules.module import _global_module_registration_hooks
    from vllm import ModelRegistry

    # Listed before anything below imports more of the package: the flag-off run must show none.
    plugin_modules = sorted(m for m in sys.modules if m.startswith("draft_head_fp8.vllm_plugin."))

    from draft_head_fp8.evidence.receipt_v3 import receipt_for_head
    from draft_head_fp8.runners import describe

    runner = worker.model_runner
    drafter = _drafter(worker)
    family = family_of(drafter)
    modules = family.resolve(drafter, runner.model)
    # The drafter's vLLM architecture; an MTP drafter's config may still name its target's.
    named = getattr(drafter.config, "architectures", None) or []
    architecture = next((a for a in named if a in family.drafters), next(iter(family.drafters)))
    entry = ModelRegistry.models.get(architecture)
    receipt = receipt_for_head(
        modules, decision=_decision(drafter, family, modules.head), phase=OBSERVED
    )
    return {
        "family": family.name,
        "receipt": receipt,
        "target_embed_sha256": _sha256(modules.target_embed.weight),
        "target_head_sha256": _sha256(modules.target_head.weight),
        "draft_heads": [path for path, _ in modules.draft_heads],
        "draft_heads_are_target_head": [m is modules.target_head for _, m in modules.draft_heads],
        # With the flag off these must show that the plugin did nothing at all.
        "plugin_modules": plugin_modules,
        "module_registration_hooks": len(_global_module_registration_hooks),
        "registry_entry": None
        if entry is None
        else f"{getattr(entry, 'module_name', '?')}:{getattr(entry, 'class_name', repr(entry))}",
        "drafter_class": f"{type(drafter).__module__}.{type(drafter).__name__}",
        # Which of vLLM's model runners served, and its speculator (MRv2) or proposer (V1).
        "runner": describe(runner),
        # The certified pick's rows by stage so far (None: no certified FP8 head serves).
        "certificate": _certificate(modules.head),
        # Each head's, where the drafter keeps one per draft layer (Step3p5MTP).
        "certificates": {path: _certificate(m) for path, m in modules.draft_heads},
    }


def _certificate(head: Any) -> dict | None:
    record = getattr(getattr(head, "quant_method", None), "certificate_record", None)
    return record() if callable(record) else None


def time_draft_head(worker: Any) -> bool:
    """Time every draft logits call (the head and its logits processor) where it runs, in the
    worker: what a user compares between the BF16 and the FP8 head."""
    import torch

    drafter = _drafter(worker)
    served = drafter.compute_logits
    calls: list[tuple[int, float]] = []  # (rows of hidden states, seconds) per call

    def compute_logits(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        cuda = hidden_states.is_cuda
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        logits = served(hidden_states, *args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        calls.append((int(hidden_states.shape[0]), time.perf_counter() - started))
        return logits

    drafter.compute_logits = compute_logits  # instance attribute: this process's probe only
    drafter._head_calls = calls
    return True


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def read_head_timing(worker: Any) -> dict | None:
    """Every draft logits call so far: overall, and by the number of rows (the batch) it served."""
    calls = getattr(_drafter(worker), "_head_calls", None)
    if not calls:
        return None
    seconds = [s for _, s in calls]
    by_rows: dict[int, list[float]] = {}
    for rows, s in calls:
        by_rows.setdefault(rows, []).append(s)
    return {
        "calls": len(seconds),
        "median_s": _median(seconds),
        "mean_s": sum(seconds) / len(seconds),
        "total_s": sum(seconds),
        "by_rows": {
            str(rows): {"calls": len(values), "median_s": _median(values)}
            for rows, values in sorted(by_rows.items())
        },
    }


def bf16_head_rows(family: Any, target_dir: str, assistant_dir: str) -> Any:
    """The checkpoint's BF16 head, read from the tensor the family names (the target's head, or
    its embedding where it is tied; the assistant's tied embedding)."""
    import torch
    from safetensors import safe_open

    from draft_head_fp8.checkpoint import find_tensor, has_tensor
    from draft_head_fp8.families.family import DRAFT

    head = family.head_in(assistant_dir)
    folder = assistant_dir if head.folder == DRAFT else target_dir
    name = head.tensor_for(tied=not has_tensor(folder, head.tensor))
    path, _, _ = find_tensor(folder, name)
    with safe_open(path, framework="pt") as f:
        return f.get_tensor(name).to(torch.bfloat16)


def layer_head_rows(family: Any, drafter: Any, assistant_dir: str) -> dict[str, Any]:
    """Each draft layer's BF16 head from the checkpoint, by the head's path in the drafter, where
    the family keeps one per draft layer (Step3p5MTP); empty otherwise."""
    import torch
    from safetensors import safe_open

    from draft_head_fp8.checkpoint import find_tensor

    if family.layer_heads is None:
        return {}
    rows = {}
    for path, name in family.layer_heads(drafter.config):
        with safe_open(find_tensor(assistant_dir, name)[0], framework="pt") as f:
            rows[path] = f.get_tensor(name).to(torch.bfloat16)
    return rows


def bf16_reference(bf16_head: Any, processor: Any) -> Any:
    """``(hidden_states, dtype) -> logits``: the BF16 head's logits from the checkpoint's own
    tensor, as vLLM's BF16 head and logits processor make them (float32 sums rounded to
    ``dtype``, the soft cap and scale in it)."""
    import torch

    soft_cap = getattr(processor, "soft_cap", None)
    scale = getattr(processor, "scale", 1.0)
    rows = max(1, (64 << 20) // (4 * bf16_head.shape[1]))  # 64 MiB of float32 rows at a time

    def logits(hidden: Any, dtype: Any) -> Any:
        h = hidden.float().cpu()
        reference = torch.cat(
            [h @ bf16_head[i : i + rows].float().t() for i in range(0, len(bf16_head), rows)], -1
        ).to(dtype)
        if soft_cap is not None:
            reference = torch.tanh(reference / soft_cap) * soft_cap
        if scale != 1.0:
            reference = reference * scale
        return reference

    return logits


def watch_top_tokens(processor: Any, reference: Any, stats: dict) -> None:
    """vLLM's greedy picks made without logits (its local argmax reduction, ``get_top_tokens``:
    each rank's argmax, then the best of the ranks), each checked against the BF16 head's and
    counted among the steps, and apart as ``top_tokens``."""
    served = getattr(type(processor), "get_top_tokens", None)
    if served is None:
        return

    def top_tokens(lm_head: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        tokens = served(processor, lm_head, hidden_states, *args, **kwargs)
        dtype = getattr(processor, "head_dtype", None) or hidden_states.dtype
        same = tokens.cpu() == reference(hidden_states, dtype).argmax(-1)
        stats["steps"] += int(same.numel())
        stats["agree"] += int(same.sum())
        stats["top_tokens"] += int(same.numel())
        return tokens

    processor.get_top_tokens = top_tokens  # an instance attribute: this process's probe only


def _draft_tokens(worker: Any) -> int:
    """The draft tokens per step: the positions of a block vLLM drafts at once (DFlash, DSpark)."""
    return worker.vllm_config.speculative_config.num_speculative_tokens


def watch_draft_agreement(worker: Any, target_dir: str, assistant_dir: str) -> bool:
    """Next to every draft logits call, compute the BF16 head's logits from the checkpoint's own
    tensor on the hidden states that reach the head (``bf16_reference``), and count how often the
    two draft tokens agree; the same for every pick vLLM makes without logits
    (``watch_top_tokens``)."""
    from draft_head_fp8 import probe_block, probe_mask

    drafter = _drafter(worker)
    family = family_of(drafter)
    bf16_head = bf16_head_rows(family, target_dir, assistant_dir)
    processor = drafter.logits_processor if hasattr(drafter, "logits_processor") else None
    processor = processor or drafter.model.logits_processor
    reference = bf16_reference(bf16_head, processor)
    stats: dict = {"steps": 0, "agree": 0, "top_tokens": 0}
    block = _draft_tokens(worker) if family_of(drafter).drafts_block else None
    # A drafter with a head per draft layer: each call compared with the head it was handed.
    by_head = _references_by_head(drafter, assistant_dir, processor, stats)

    # At the logits processor, not compute_logits: some drafters transform the hidden states on
    # the way to the head (DeepSeek's MTP layer applies its shared_head norm first).
    def compare(module: Any, args: tuple, kwargs: dict, logits: Any) -> None:
        hidden_states = args[1] if len(args) > 1 else kwargs["hidden_states"]
        if logits is None:
            return
        head = args[0] if args else kwargs["lm_head"]
        expected, counts = by_head.get(id(head), (reference, None))
        expected = expected(hidden_states, logits.dtype)
        served_logits = logits.cpu()
        vocab = min(expected.shape[-1], served_logits.shape[-1])
        # A suffix vLLM's drafter masks after the head (seen here before the mask) is never drafted.
        drafted = probe_mask.drafted_tokens(family, drafter.config, vocab)
        picks = expected[..., :drafted].argmax(-1)
        same = served_logits[..., :drafted].argmax(-1) == picks
        stats["steps"] += int(same.numel())
        stats["agree"] += int(same.sum())
        if drafted < vocab:
            probe_mask.count_masked(stats, expected[..., :vocab], drafted, head, hidden_states)
        if counts is not None:
            counts["steps"] += int(same.numel())
            counts["agree"] += int(same.sum())
        if block is not None:  # one call holds whole blocks: counted per position too
            plain = probe_block.plain_fp8_argmax(head, hidden_states, vocab)
            probe_block.count_block(stats, block, same, picks, plain)

    watch_top_tokens(processor, reference, stats)
    if family_of(drafter).top_k is not None:  # the head's top-K is read: checked there
        from draft_head_fp8.probe_top_k import watch_candidates

        watch_candidates(drafter, _draft_tokens(worker), bf16_reference(bf16_head, None), stats)
    if family_of(drafter).term is not None:  # the pick is made after a term: checked there
        from draft_head_fp8.probe_term import watch_term_agreement

        compare = watch_term_agreement(drafter, _draft_tokens(worker), reference, stats)
    # One watch at a time: after a weight update the reference is the updated head's.
    previous = getattr(drafter, "_draft_agreement_hook", None)
    if previous is not None:
        previous.remove()
    drafter._draft_agreement_hook = processor.register_forward_hook(compare, with_kwargs=True)
    drafter._draft_agreement = stats
    return True


def _references_by_head(drafter: Any, assistant_dir: str, processor: Any, stats: dict) -> dict:
    """id(head module) -> (its BF16 reference, its counts in ``stats["by_head"]``), for every
    draft layer's head (empty for a drafter with one head)."""
    family = family_of(drafter)
    rows = layer_head_rows(family, drafter, assistant_dir)
    if not rows:
        return {}
    stats["by_head"] = {path: {"steps": 0, "agree": 0} for path in rows}
    return {
        id(drafter.get_submodule(path)): (bf16_reference(r, processor), stats["by_head"][path])
        for path, r in rows.items()
    }


def load_weights(worker: Any, model: str, file: str, names: list[str]) -> list[str]:
    """The model's own ``load_weights`` in this worker, with tensors read from ``file``: an
    in-place update no one announced (``model``: "target" or "draft")."""
    from safetensors.torch import load_file

    tensors = load_file(file)
    chosen = names or sorted(tensors)
    module = worker.model_runner.model if model == "target" else _drafter(worker)
    module.load_weights([(name, tensors[name]) for name in chosen])
    return chosen


def read_draft_agreement(worker: Any) -> dict | None:
    return getattr(_drafter(worker), "_draft_agreement", None)


def peak_device_bytes(worker: Any) -> int | None:
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


class WorkerProbe:
    """Mixed into vLLM's worker class (``worker_extension_cls``); ``self`` is the worker."""

    def probe_observe(self) -> dict:
        return observe(self)

    def probe_watch_draft_agreement(self, target_dir: str, assistant_dir: str) -> bool:
        return watch_draft_agreement(self, target_dir, assistant_dir)

    def probe_read_draft_agreement(self) -> dict | None:
        return read_draft_agreement(self)

    def probe_time_draft_head(self) -> bool:
        return time_draft_head(self)

    def probe_read_head_timing(self) -> dict | None:
        return read_head_timing(self)

    def probe_peak_device_bytes(self) -> int | None:
        return peak_device_bytes(self)

    def probe_load_weights(self, model: str, file: str, names: list[str]) -> list[str]:
        return load_weights(self, model, file, names)
