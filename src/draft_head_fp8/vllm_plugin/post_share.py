"""The post-share point: after vLLM's proposer hands the drafter the target's modules, before any
request. vLLM has no callback there, so this watches module registration (torch's public
``register_module_module_registration_hook``), which sees every event it needs, in the worker,
in every mode:

- an ``lm_head`` registered on a model while vLLM builds it: the candidates for the target,
  observed on the target itself and never modified;
- the family's share on an armed drafter: ``embed_tokens`` on its inner model where the drafter
  keeps its own head (the target's embedding replaces the draft's), or each reference to the
  target's head (``lm_head``, and each MTP layer's ``shared_head.head``) where the drafter reads
  the target's head: this hook hands back the private FP8 head instead (``shared_head``), so
  every drafter reference points to it and the target's head keeps serving the target alone.

When the share is complete the receipt and the exact pick's facts are captured from the
family's resolved modules, validated and archived with the diagnostics, in one boot per node of
the engine (``launch``); with tensor parallelism the ranks then check each other. A failure
raises from the hook, which makes engine start-up fail with the reason.
"""

from __future__ import annotations

import sys
import uuid
import weakref
from functools import partial
from typing import Any

import torch
from torch.nn.modules.module import register_module_module_registration_hook
from vllm.logger import init_logger

from draft_head_fp8 import settings
from draft_head_fp8.errors import HeadFp8EligibilityError, ProofNotKept
from draft_head_fp8.evidence import (
    POST_SHARE,
    RANKS_PATH,
    diagnostics,
    diagnostics_path,
    receipt_path,
)
from draft_head_fp8.evidence.diagnostics import describe_paths
from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.evidence.exact_pick import validate_pick
from draft_head_fp8.evidence.receipt_v3 import receipt_for_head
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.families.family import AT_SHARE, Modules, is_head
from draft_head_fp8.nodes import LAUNCH_RECORD, NodePlace, single_node
from draft_head_fp8.runners import describe, find_on_stack, find_worker_on_stack
from draft_head_fp8.vllm_plugin import launch, layer_heads, shared_head, updates
from draft_head_fp8.vllm_plugin.plan import HeadPlan
from draft_head_fp8.vllm_plugin.refusal import announce_refusal

# Under "vllm." so that vLLM's own logging configuration shows it beside its lines.
logger = init_logger(f"vllm.{__name__}")

_hook_handle: Any = None
# Models that had an `lm_head` registered on them, weakly: the target's language model is one.
_lm_head_owners: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
# parent module -> {attribute name -> armed drafter}: the registrations that are the share
_points: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, _Armed]] = weakref.WeakKeyDictionary()
# every module of a drafter that reads the target's head, once its receipt is taken
_proven: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
_pending: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


class _Armed:
    def __init__(self, drafter: torch.nn.Module, vllm_config: Any, plan: HeadPlan) -> None:
        self.drafter = weakref.ref(drafter)
        self.plan = plan
        self.vllm_config = vllm_config  # the current config, where a head is made at the share
        # This worker's name for the engine start; with several ranks, rank 0's wins (each
        # worker's config is rebuilt, and its instance id with it).
        instance = str(getattr(vllm_config, "instance_id", "") or "") or uuid.uuid4().hex
        self.launch_id = f"vllm-{instance}"[:64]
        self.remaining = 0  # share points still to come
        self.private: Any = None  # the private FP8 head, made at the first head share


def install_hook() -> None:
    """Once per process, and only with the flag on (called from the plugin's ``register``)."""
    global _hook_handle
    if _hook_handle is None:
        _hook_handle = register_module_module_registration_hook(_on_module_registered)


def arm(drafter: torch.nn.Module, vllm_config: Any, plan: HeadPlan) -> None:
    """Watch for this drafter's share: where its own head is kept, the embedding's; where it
    reads the target's head, every reference to a head it holds, and ``lm_head``."""
    install_hook()
    armed = _Armed(drafter, vllm_config, plan)
    if plan.head.when == AT_SHARE:
        points = {("", "lm_head")} | {_split(path) for path, _ in plan.family.draft_heads(drafter)}
    else:
        points = {("model", plan.family.share)}
    for owner, name in points:
        parent = drafter.get_submodule(owner) if owner else drafter
        _points.setdefault(parent, {})[name] = armed
    armed.remaining = len(points)
    _pending.add(drafter)


def _split(path: str) -> tuple[str, str]:
    owner, _, name = path.rpartition(".")
    return owner, name


def pending(drafter: torch.nn.Module) -> bool:
    return drafter in _pending


def _on_module_registered(parent: torch.nn.Module, name: str, submodule: Any) -> Any:
    if name == "lm_head":
        _lm_head_owners.add(parent)
    armed = _points.get(parent, {}).pop(name, None)
    if armed is None:
        if parent in _proven and is_head(submodule):
            # A head handed to the drafter after its receipt: nothing proves what it serves.
            exc = HeadFp8EligibilityError(
                f"a draft head reference ({name}) was shared after the post-share receipt of "
                f"{_proven[parent]}: nothing proves what it serves"
            )
            announce_refusal(exc)
            raise exc
        return None
    drafter = armed.drafter()
    if drafter is None or submodule is None:
        return None
    armed.remaining -= 1
    try:
        if armed.plan.head.when == AT_SHARE:
            submodule = _private_head(armed, drafter, submodule)
        # torch sets the attribute right after this hook returns; set it now, to the same module,
        # so that the receipt observes the draft exactly as it will serve.
        parent._modules[name] = submodule
        if armed.remaining == 0:
            _capture(drafter, armed, submodule)
    except Exception as exc:
        announce_refusal(exc)
        raise
    return submodule


def _private_head(armed: _Armed, drafter: torch.nn.Module, shared: Any) -> Any:
    """What a reference to the target's head becomes: the one private FP8 head of this drafter."""
    target = _owner_of_head(drafter, shared)
    if armed.private is None:
        armed.private = shared_head.make_private_head(
            armed.plan, armed.vllm_config, drafter, target, shared
        )
    return armed.private


def _owner_of_head(drafter: torch.nn.Module, head: Any) -> torch.nn.Module:
    for owner in list(_lm_head_owners):
        if owner is not drafter and getattr(owner, "lm_head", None) is head:
            return owner
    raise HeadFp8EligibilityError(
        "the head shared with the draft belongs to no target model observed while it was "
        "built; cannot prove what happened to the target"
    )


def _owner_of_embedding(drafter: torch.nn.Module, embed: Any) -> torch.nn.Module:
    for owner in list(_lm_head_owners):
        if owner is drafter:
            continue
        body = getattr(owner, "model", None)
        if body is not None and getattr(body, "embed_tokens", None) is embed:
            return owner
    raise HeadFp8EligibilityError(
        "the embedding shared with the draft belongs to no target model observed while it was "
        "built; cannot prove what happened to the target"
    )


def _first_failure(receipt: dict, pick: dict) -> str | None:
    failure = receipt_verdict(receipt)
    if failure is not None:
        return failure
    try:
        validate_pick(pick)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


def _modules(drafter: torch.nn.Module, armed: _Armed, shared: Any) -> Modules:
    if armed.plan.head.when == AT_SHARE:
        target = _owner_of_head(drafter, shared_head.target_head_of(armed.private))
    else:
        target = _owner_of_embedding(drafter, shared)
    return armed.plan.family.resolve(drafter, target)


def _capture(drafter: torch.nn.Module, armed: _Armed, shared: Any) -> None:
    model_runner = find_on_stack(sys._getframe())
    modules = _modules(drafter, armed, shared)
    head = modules.head
    method = head.quant_method
    rank, tp_size = int(getattr(head, "tp_rank", 0)), int(getattr(head, "tp_size", 1))
    # One head's receipt, or every head's where the drafter keeps one per draft layer (v3 then).
    v3 = layer_heads.several(armed.plan)
    receipt, pick = layer_heads.receipt_and_pick(
        modules,
        armed.plan,
        lambda one, decision: receipt_for_head(one, decision=decision, phase=POST_SHARE, v3=v3),
    )
    worker = find_worker_on_stack(sys._getframe())
    # A vLLM that moved a method the plugin wraps: refused here, not skipped without a word.
    failure = _first_failure(receipt, pick) or updates.unwrappable(
        model_runner, worker, modules.target, drafter
    )
    target = modules.target
    record = diagnostics.record(
        phase=POST_SHARE,
        rank=rank,
        family=armed.plan.family.name,
        target_class=f"{type(target).__module__}.{type(target).__name__}",
        head=getattr(method, "diagnostics", {}),
        exact_pick=pick,
        failure=failure,
        runner=None if model_runner is None else describe(model_runner),
        certificate=method.certificate_record() if hasattr(method, "certificate_record") else None,
    )
    # One boot per node of the engine start (one boot on one node): rank 0 names the launch.
    where = launch.place_rank(
        launch_id=armed.launch_id, vllm_config=armed.vllm_config, rank=rank, tp_size=tp_size,
        exchange=launch.exchange,
    )  # fmt: skip
    boot, not_archived = _archive(where.launch_id, tp_size, rank, receipt, record, where)
    if not_archived is not None:  # raised below, once the other ranks have heard of it
        failure = failure or str(not_archived)
    if tp_size > 1:
        failure = launch.cross_check(
            rank=rank, tp_size=tp_size, failure=failure, receipt=receipt, record=record,
            pick=pick, keep_ranks=None if boot is None else partial(_keep, boot, RANKS_PATH),
        )  # fmt: skip
    _seal(None if not_archived is not None else boot, where)  # every rank takes its node's turn
    if not_archived is not None:
        raise not_archived
    if failure is not None:
        raise HeadFp8EligibilityError(
            f"post-share receipt failed validation: {failure} (receipt archived in {boot.path})"
        )
    _pending.discard(drafter)
    # From now on every weight update proves the head again (reload, transfer, load_weights).
    updates.watch(
        drafter, modules.target, armed=armed, boot=boot, where=where, model_runner=model_runner,
        worker=worker,
    )  # fmt: skip
    if armed.plan.head.when == AT_SHARE:
        for path, _ in drafter.named_modules(remove_duplicate=False):
            _proven[drafter.get_submodule(path) if path else drafter] = receipt_path(rank)
    _announce_pass(receipt, rank, tp_size, method, pick, boot)


def _archive(
    launch_id: str,
    tp_size: int,
    rank: int,
    receipt: dict,
    record: dict,
    where: NodePlace | None = None,
) -> tuple[Any, ProofNotKept | None]:
    """This rank's receipt and diagnostics, kept in its node's boot of the engine start (``where``;
    default: every rank on one node); the boot (None if it could not be joined), and why the proof
    could not be kept, if it could not."""
    where = where or single_node(launch_id=launch_id, tp_size=tp_size)
    boot = None
    try:
        boot = launch.in_node_turns(where, lambda: _join_boot(where))
        _keep(boot, receipt_path(rank), receipt)
        _keep(boot, diagnostics_path(rank), record)
    except ProofNotKept as exc:
        return boot, exc
    return boot, None


def _announce_pass(
    receipt: dict, rank: int, tp_size: int, method: Any, pick: dict, boot: Any
) -> None:
    logger.info(
        "draft-head-fp8: post-share receipt passed (%s, rank %d of %d): head %s on %s (%s, %s), "
        "weight %s %s; %s; %s; target head on %s; archived in %s",
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
        describe_paths(method.diagnostics.get("batch_paths") or {}),
        receipt["target_lm_head_method"],
        boot.path,
    )


def _archive_error(exc: Exception) -> ProofNotKept:
    # The proof is the product: a boot that cannot keep it does not start.
    return ProofNotKept(
        f"cannot archive the post-share receipt ({exc}); set {settings.ARCHIVE_ENV} to a "
        "writable folder"
    )


def _join_boot(where: NodePlace) -> Any:
    from draft_head_fp8.archive import Archive, ArchiveError, default_root

    # A node's boot says where it belongs in its launch; a boot of one node is as it always was.
    extra = None if where.nnodes == 1 else {LAUNCH_RECORD: where.record()}
    try:
        archive = Archive(settings.archive_root() or default_root())
        return archive.join_boot(where.boot_key, expected_files=where.expected_files, extra=extra)
    except (OSError, ArchiveError) as exc:
        raise _archive_error(exc) from exc


def _keep(boot: Any, name: str, document: dict) -> None:
    from draft_head_fp8.archive import ArchiveError

    try:
        boot.add_bytes(name, document_bytes(document))
    except (OSError, ArchiveError) as exc:
        raise _archive_error(exc) from exc


def _seal(boot: Any, where: NodePlace | None = None) -> None:
    """Seal the boot if this rank wrote the last of its node's files; the other ranks leave it.
    ``boot`` None: this rank kept nothing, and only takes its turn."""
    from draft_head_fp8.archive import ArchiveError

    def seal() -> None:
        try:
            if boot is not None:
                boot.seal_if_complete()
        except (OSError, ArchiveError) as exc:
            raise _archive_error(exc) from exc

    if where is None:
        seal()
    else:
        launch.in_node_turns(where, seal)
