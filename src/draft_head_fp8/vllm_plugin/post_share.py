"""The post-share point: after the proposer gives the draft the target's embedding, before any
request. vLLM has no callback there, so this watches module registration (torch's public
``register_module_module_registration_hook``), which sees both events it needs, in the worker,
in every mode:

- an ``lm_head`` registered on a model while vLLM builds it: the candidates for the target, observed
  on the target itself and never modified;
- ``embed_tokens`` registered on an armed drafter's inner model: the share itself.

At the share the receipt is captured, validated and archived with the diagnostics; a failure
raises from the hook, which makes engine start-up fail with the reason.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
from torch.nn.modules.module import register_module_module_registration_hook
from vllm.logger import init_logger

from draft_head_fp8.evidence import POST_SHARE, diagnostics, diagnostics_path, receipt_path
from draft_head_fp8.evidence.checks import validate_post_share_receipt
from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.evidence.receipt import make_runtime_receipt
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
        self.rank = int(getattr(vllm_config.parallel_config, "rank", 0) or 0)


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
        _capture(drafter, submodule, armed.rank)
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


def _capture(drafter: torch.nn.Module, shared_embed: torch.nn.Module, rank: int) -> None:
    target = _target_language_model(drafter, shared_embed)
    receipt = make_runtime_receipt(
        head=drafter.lm_head,
        draft_model=drafter,
        target_model=target,
        decision=drafter.head_decision,
        phase=POST_SHARE,
    )
    try:
        validate_post_share_receipt(receipt)
        failure = None
    except HeadFp8EligibilityError as exc:
        failure = str(exc)
    record = diagnostics.record(
        phase=POST_SHARE,
        rank=rank,
        target_class=f"{type(target).__module__}.{type(target).__name__}",
        head=getattr(drafter.lm_head.quant_method, "diagnostics", {}),
        failure=failure,
    )
    where = _archive(receipt, record, rank)
    if failure is not None:
        raise HeadFp8EligibilityError(
            f"post-share receipt failed validation: {failure} (receipt archived in {where})"
        )
    logger.info(
        "draft-head-fp8: post-share receipt passed: head %s on %s (%s), weight %s %s; target head "
        "on %s; archived in %s",
        receipt["prefix"],
        receipt["head_method"],
        receipt["head_kernel"],
        receipt["head_weight"]["dtype"],
        receipt["head_weight"]["shape"],
        receipt["target_lm_head_method"],
        where,
    )


def _archive(receipt: dict, record: dict, rank: int) -> str:
    from draft_head_fp8.archive import Archive, ArchiveError, default_root

    try:
        archive = Archive(os.environ.get("DRAFT_HEAD_FP8_ARCHIVE") or default_root())
        boot = archive.begin_boot()
        boot.add_bytes(receipt_path(rank), document_bytes(receipt))
        boot.add_bytes(diagnostics_path(rank), document_bytes(record))
        boot.seal()
    except (OSError, ArchiveError) as exc:
        # The proof is the product: a boot that cannot keep it does not start.
        raise HeadFp8EligibilityError(
            f"cannot archive the post-share receipt ({exc}); set DRAFT_HEAD_FP8_ARCHIVE to a "
            "writable folder"
        ) from exc
    return str(boot.path)
