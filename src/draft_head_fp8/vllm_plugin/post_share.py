"""The post-share point: after the proposer gives the draft the target's embedding, before any
request. vLLM has no callback there, so this watches module registration (torch's public
``register_module_module_registration_hook``), which sees both events it needs, in the worker,
in every mode:

- an ``lm_head`` registered on a model while vLLM builds it: the candidates for the target, observed
  on the target itself and never modified;
- ``embed_tokens`` registered on an armed drafter's inner model: the share itself.

At the share the receipt (v2, or v3 where v2 cannot describe the head) and the exact pick's facts
are captured, validated and archived with the diagnostics, in one boot shared by every rank of
the engine; with tensor parallelism the ranks then check each other. A failure raises from the
hook, which makes engine start-up fail with the reason.
"""

from __future__ import annotations

import os
import uuid
import weakref
from typing import Any

import torch
from torch.nn.modules.module import register_module_module_registration_hook
from vllm.logger import init_logger

from draft_head_fp8.evidence import (
    POST_SHARE,
    RANKS_PATH,
    boot_files,
    diagnostics,
    diagnostics_path,
    receipt_path,
)
from draft_head_fp8.evidence.checks import validate_post_share_receipt
from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.evidence.exact_pick import pick_record, validate_pick
from draft_head_fp8.evidence.ranks import cross_rank_problems, rank_summary
from draft_head_fp8.evidence.receipt_v3 import receipt_for_head
from draft_head_fp8.policy import HeadFp8EligibilityError
from draft_head_fp8.vllm_plugin.refusal import announce_refusal

logger = init_logger(__name__)

_hook_handle: Any = None
# Models that had an `lm_head` registered on them, weakly: the target's language model is one.
_lm_head_owners: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
# inner draft model (the module whose embed_tokens the proposer replaces) -> armed drafter state
_armed: weakref.WeakKeyDictionary[torch.nn.Module, _Armed] = weakref.WeakKeyDictionary()
_pending: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


class _Armed:
    def __init__(self, drafter: torch.nn.Module, vllm_config: Any) -> None:
        self.drafter = weakref.ref(drafter)
        # This worker's name for the engine start; with several ranks, rank 0's wins (each
        # worker's config is rebuilt, and its instance id with it).
        instance = str(getattr(vllm_config, "instance_id", "") or "") or uuid.uuid4().hex
        self.launch_id = f"vllm-{instance}"[:64]
        speculative = getattr(vllm_config, "speculative_config", None)
        self.draft_sample_method = getattr(speculative, "draft_sample_method", "greedy")


def install_hook() -> None:
    """Once per process, and only with the flag on (called from the plugin's ``register``)."""
    global _hook_handle
    if _hook_handle is None:
        _hook_handle = register_module_module_registration_hook(_on_module_registered)


def arm(drafter: torch.nn.Module, vllm_config: Any) -> None:
    install_hook()
    _armed[drafter.model] = _Armed(drafter, vllm_config)
    _pending.add(drafter)


def pending(drafter: torch.nn.Module) -> bool:
    return drafter in _pending


def _on_module_registered(parent: torch.nn.Module, name: str, submodule: Any) -> None:
    if name == "lm_head":
        _lm_head_owners.add(parent)
        return None
    if name != "embed_tokens" or parent not in _armed:
        return None
    # Disarm first, and never remove a hook from inside a hook (torch iterates the hook dict).
    armed = _armed.pop(parent)
    drafter = armed.drafter()
    if drafter is None or submodule is None:
        return None
    # torch sets the attribute right after this hook returns; set it now, to the same module,
    # so that the receipt observes the draft exactly as it will serve.
    parent._modules[name] = submodule
    try:
        _capture(drafter, submodule, armed)
    except Exception as exc:
        announce_refusal(exc)
        raise
    _pending.discard(drafter)
    return None


def _target_language_model(
    drafter: torch.nn.Module, shared_embed: torch.nn.Module
) -> torch.nn.Module:
    for owner in list(_lm_head_owners):
        if owner is drafter:
            continue
        body = getattr(owner, "model", None)
        if body is not None and getattr(body, "embed_tokens", None) is shared_embed:
            return owner
    raise HeadFp8EligibilityError(
        "the embedding shared with the draft belongs to no target model observed while it was "
        "built; cannot prove what happened to the target"
    )


def _first_failure(receipt: dict, pick: dict) -> str | None:
    try:
        validate_post_share_receipt(receipt)
        validate_pick(pick)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


def _exchange(summary: Any, tp_size: int) -> list[Any]:
    """Every rank's value, on every rank (one small all-gather over the TP group's CPU side)."""
    import torch.distributed as dist
    from vllm.distributed.parallel_state import get_tp_group

    gathered: list[Any] = [None] * tp_size
    dist.all_gather_object(gathered, summary, group=get_tp_group().cpu_group)
    return gathered


def _capture(drafter: torch.nn.Module, shared_embed: torch.nn.Module, armed: _Armed) -> None:
    target = _target_language_model(drafter, shared_embed)
    head = drafter.lm_head
    method = head.quant_method
    rank, tp_size = int(getattr(head, "tp_rank", 0)), int(getattr(head, "tp_size", 1))
    receipt = receipt_for_head(
        head=head,
        draft_model=drafter,
        target_model=target,
        decision=drafter.head_decision,
        phase=POST_SHARE,
    )
    pick = pick_record(
        method=method,
        draft_model=drafter,
        target_model=target,
        draft_sample_method=armed.draft_sample_method,
    )
    failure = _first_failure(receipt, pick)
    record = diagnostics.record(
        phase=POST_SHARE,
        rank=rank,
        target_class=f"{type(target).__module__}.{type(target).__name__}",
        head=getattr(method, "diagnostics", {}),
        exact_pick=pick,
        failure=failure,
    )
    # One boot per engine start, whatever the number of ranks: rank 0 names it.
    launch_id = armed.launch_id if tp_size == 1 else _exchange(armed.launch_id, tp_size)[0]
    boot, not_archived = None, None
    try:
        boot = _join_boot(launch_id, tp_size)
        _keep(boot, receipt_path(rank), receipt)
        _keep(boot, diagnostics_path(rank), record)
    except HeadFp8EligibilityError as exc:
        not_archived = exc  # raised below, once the other ranks have heard of it
        failure = failure or str(exc)
    if tp_size > 1:
        # Each rank proved its own shard; together they must be one head. Every rank reaches
        # this point, a failed one too, so no rank waits for another that already gave up.
        mine = rank_summary(
            rank=rank,
            tp_size=tp_size,
            failure=failure,
            receipt=receipt,
            scale=record["head"].get("scale"),
            top_k=pick["top_k"],
        )
        summaries = _exchange(mine, tp_size)
        problems = cross_rank_problems(summaries, tp_size)
        if rank == 0 and boot is not None:
            _keep(boot, RANKS_PATH, diagnostics.ranks_record(
                tp_size=tp_size, summaries=summaries, problems=problems
            ))  # fmt: skip
        if problems and failure is None:
            failure = "across ranks: " + "; ".join(problems)
    if not_archived is not None:
        raise not_archived
    _seal(boot)
    if failure is not None:
        raise HeadFp8EligibilityError(
            f"post-share receipt failed validation: {failure} (receipt archived in {boot.path})"
        )
    logger.info(
        "draft-head-fp8: post-share receipt passed (%s, rank %d of %d): head %s on %s (%s, %s), "
        "weight %s %s; %s; target head on %s; archived in %s",
        receipt["schema"].rsplit("/", 1)[-1],
        rank,
        tp_size,
        receipt["prefix"],
        receipt["head_method"],
        receipt["head_kernel"],
        getattr(method, "weight_layout", "plain"),
        receipt["head_weight"]["dtype"],
        receipt["head_weight"]["shape"],
        pick["guarantee"],
        receipt["target_lm_head_method"],
        boot.path,
    )


def _archive_error(exc: Exception) -> HeadFp8EligibilityError:
    # The proof is the product: a boot that cannot keep it does not start.
    return HeadFp8EligibilityError(
        f"cannot archive the post-share receipt ({exc}); set DRAFT_HEAD_FP8_ARCHIVE to a "
        "writable folder"
    )


def _join_boot(launch_id: str, tp_size: int) -> Any:
    from draft_head_fp8.archive import Archive, ArchiveError, default_root

    try:
        archive = Archive(os.environ.get("DRAFT_HEAD_FP8_ARCHIVE") or default_root())
        return archive.join_boot(launch_id, expected_files=boot_files(tp_size))
    except (OSError, ArchiveError) as exc:
        raise _archive_error(exc) from exc


def _keep(boot: Any, name: str, document: dict) -> None:
    from draft_head_fp8.archive import ArchiveError

    try:
        boot.add_bytes(name, document_bytes(document))
    except (OSError, ArchiveError) as exc:
        raise _archive_error(exc) from exc


def _seal(boot: Any) -> None:
    """Seal the boot if this rank wrote the last of its files; the other ranks leave it."""
    from draft_head_fp8.archive import ArchiveError

    try:
        boot.seal_if_complete()
    except (OSError, ArchiveError) as exc:
        raise _archive_error(exc) from exc
