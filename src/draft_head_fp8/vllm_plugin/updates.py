"""Weights that change while serving: after every weight update the draft head is proven again,
in the engine that keeps serving, before its next draft step, and a write the engine was not told
of is caught before the next draft-head call. Never an FP8 pick from bytes a receipt does not
describe.

What is watched, in each worker, from the moment the start-up proof passes (``watch``):
- announced updates: the model runner's ``reload_weights``, the worker's weight-transfer session
  (``start_weight_update`` / ``start_draft_weight_update`` ... ``finish_weight_update``) and its
  ``wake_up``; proven where they end, on every rank together (vLLM calls every worker), so at
  TP N the ranks check each other again;
- ``load_weights`` of the target and of the drafter outside an announced update (what RL
  frameworks call in place through ``collective_rpc``): noted, and proven before the next
  draft-head call;
- the BF16 tensor the head was made from: its identity and torch's version counter, read before
  every draft-head call (host-side facts, no device sync).

A proof re-makes the FP8 copy from the rows as they now are (the head method's ``remake``: its
start-up path, in place), hashes them (against the checkpoint the update named, else "weight update
N"), checks that the plugin wrote nothing of the target, validates a v4 receipt, and keeps it as
one more sealed record of the boot (``archive.proofs``). A head that cannot be served in FP8 after
the update (non-finite rows, a rank that failed) is refused with the reason, and its own BF16 rows
serve every draft-head call, exactly; the record says so.

Not seen: a write through ``.data`` or a collective into the rows outside ``load_weights`` (torch
bumps no version counter for those), a raw pointer write, and, under a CUDA graph's replay
(where no Python runs), any write that is not announced. At TP > 1 a write seen only at a
draft-head call cannot be proven there (the ranks would have to meet): that rank's BF16 rows
serve until the next announced update proves the head again.
"""

from __future__ import annotations

import functools
import weakref
from functools import partial
from typing import Any

import torch
from vllm.logger import init_logger

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.families.family import AT_SHARE
from draft_head_fp8.policy import draft_update_refused
from draft_head_fp8.vllm_plugin import layer_heads, seams, update_proof
from draft_head_fp8.vllm_plugin.head_bytes import checkpoint_of
from draft_head_fp8.vllm_plugin.refusal import announce_refused_call

logger = init_logger(f"vllm.{__name__}")

TARGET, DRAFT = "target", "draft"


def _holders(model_runner: Any, worker: Any, target: Any, drafter: Any) -> dict[str, tuple]:
    """The objects that hold each kind of wrapped method in this worker (None: not found there,
    e.g. a drafter built outside a model runner: nothing can call those methods)."""
    return {
        seams.MODEL_RUNNER: (model_runner,),
        seams.WORKER: (worker,),
        seams.MODEL: (target, drafter),
    }


def unwrappable(model_runner: Any, worker: Any, target: Any, drafter: Any) -> str | None:
    """Why a method the plugin must wrap is missing on the objects this worker serves with (the
    seams table's ``WRAPPED_METHODS``), else None: the flag then refuses start-up, since a weight
    update through that method would go unproven."""
    holders = _holders(model_runner, worker, target, drafter)
    found = [
        why
        for method in seams.WRAPPED_METHODS
        for obj in holders[method.holder]
        if obj is not None and (why := seams.method_missing(method, obj)) is not None
    ]
    return "; ".join(found) or None


def _wrap(owner: Any, name: str, around: Any) -> None:
    """``owner.name`` (an instance's method) replaced by ``around(original, *args, **kwargs)``:
    this worker's objects only, flag on only. Every name is a row of the seams table, checked at
    the share (``unwrappable``): one missing here is a bug, never a skip."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return around(original, *args, **kwargs)

    setattr(owner, name, wrapped)


class Watch:
    """One drafter's proven head on this rank, and the updates it has been proven after."""

    def __init__(self, *, drafter: Any, target: Any, armed: Any, boot: Any, where: Any) -> None:
        self.drafter = weakref.ref(drafter)
        self.target = weakref.ref(target)
        self.plan = armed.plan
        self.vllm_config = armed.vllm_config
        self.boot, self.where = boot, where
        self.updates = 0  # every update seen, announced or not
        self.proofs = 0  # later proofs kept in the boot
        self.session: dict | None = None  # the announced update running now
        self.unproven: dict | None = None  # a write seen outside any announced update
        self.rows = self._rows()
        self.rows_version = self.rows._version
        self.kept = self._every_rows()  # every head's rows and their versions, as proven

    # -- what is read

    def modules(self) -> Any:
        return self.plan.family.resolve(self.drafter(), self.target())

    def _rows(self) -> torch.Tensor:
        """The BF16 tensor the head is made from: the target's head weight, or the drafter's own
        rows (kept by the head method since load)."""
        modules = self.modules()
        if self.plan.head.when == AT_SHARE:
            return modules.target_head.weight
        return modules.head.quant_method.source_rows

    def heads(self) -> list[Any]:
        """Every head the drafter serves (one per draft layer where it keeps several)."""
        return layer_heads.head_modules(self.modules(), self.plan)

    def _every_rows(self) -> list[tuple[torch.Tensor, int]]:
        if not layer_heads.several(self.plan):
            return [(self._rows(), self._rows()._version)]
        rows = [head.quant_method.source_rows for head in self.heads()]
        return [(r, r._version) for r in rows]

    def _changed(self) -> bool:
        now = self._every_rows()
        return len(now) != len(self.kept) or any(
            r is not kept or r._version != version
            for (r, _), (kept, version) in zip(now, self.kept, strict=True)
        )

    def checkpoint(self, folder: Any, head: Any, tensor: str | None = None) -> Any:
        """The checkpoint tensor the rows must match, in ``folder`` (None: no file vouches);
        ``tensor``: a head's own, where the drafter keeps several."""
        if folder is None:
            return None
        if tensor is not None:
            return checkpoint_of(folder, head, head.quant_method.source_rows.dtype, tensor)
        target = self.modules().target
        tied = self.rows is getattr(getattr(target, "model", target).embed_tokens, "weight", None)
        return checkpoint_of(folder, head, self.rows.dtype, self.plan.head.tensor_for(tied))

    # -- when it is proven

    def note(self, kind: str, model: str | None, detail: str, announced: bool) -> dict:
        self.updates += 1
        return {"number": self.updates, "kind": kind, "model": model, "announced": announced,
                "detail": detail}  # fmt: skip

    def before_draft_call(self) -> None:
        """Host-side only: a write since the last proof that no announced update proved."""
        if self.session is not None:
            return  # mid-update: vLLM does not draft then; proven when the update ends
        if self.unproven is None and self._changed():
            self.unproven = self.note(
                "write", None, "the head's BF16 rows changed (torch's version counter) with no "
                "update announced", announced=False,
            )  # fmt: skip
        if self.unproven is None:
            return
        update, self.unproven = self.unproven, None
        if int(getattr(self.modules().head, "tp_size", 1)) > 1:
            self.fall_back(update, "at TP > 1 a write seen at a draft-head call cannot be proven "
                           "there (the ranks would have to meet)")  # fmt: skip
        else:
            self.prove(update, folder=None)

    def prove(self, update: dict, folder: Any) -> None:
        update_proof.prove(self, update, folder)
        self._keep_rows()

    def _keep_rows(self) -> None:
        self.rows = self._rows()
        self.rows_version = self.rows._version
        self.kept = self._every_rows()

    def serve_bf16_rows(self, reason: str) -> None:
        """Every head serves its own BF16 rows from the next call (exact, no FP8 byte read)."""
        if not layer_heads.several(self.plan):
            head = self.modules().head
            head.quant_method.serve_bf16_rows(head, self._rows(), reason)
            return
        for head in self.heads():
            head.quant_method.serve_bf16_rows(head, head.quant_method.source_rows, reason)

    def fall_back(self, update: dict, reason: str) -> None:
        self.serve_bf16_rows(reason)
        self._keep_rows()
        logger.warning(
            "draft-head-fp8: weight update %d (%s) not proven: %s; the head's BF16 rows serve "
            "every draft-head call until an announced update proves it again",
            update["number"], update["detail"], reason,
        )  # fmt: skip


def watch(
    drafter: Any, target: Any, *, armed: Any, boot: Any, where: Any,
    model_runner: Any, worker: Any,
) -> Watch:  # fmt: skip
    """Watch the proven head of ``drafter`` for weight updates, on this worker."""
    w = Watch(drafter=drafter, target=target, armed=armed, boot=boot, where=where)
    for head in w.heads():
        head.quant_method.watch = w
    around = {
        "reload_weights": (partial(_reload, w),),
        "start_weight_update": (partial(_start, w, TARGET),),
        "start_draft_weight_update": (partial(_start, w, DRAFT),),
        "finish_weight_update": (partial(_finish, w),),
        "wake_up": (partial(_wake_up, w),),
        "shutdown": (partial(_shutdown, w),),
        "load_weights": (partial(_load_weights, w, TARGET), partial(_load_weights, w, DRAFT)),
    }
    holders = _holders(model_runner, worker, target, drafter)
    for method in seams.WRAPPED_METHODS:  # the table is the list: a new row needs its wrapper
        for obj, wrapper in zip(holders[method.holder], around[method.name], strict=True):
            if obj is not None:
                _wrap(obj, method.name, wrapper)
    return w


def _reload(w: Watch, original: Any, *args: Any, **kwargs: Any) -> Any:
    path = kwargs.get("weights_path") or (args[1] if len(args) > 1 else None)
    from_iterator = kwargs.get("weights_iterator") is not None or (args and args[0] is not None)
    w.session = w.note(
        "reload_weights", TARGET,
        f"reload_weights({'weights_iterator' if from_iterator else f'weights_path={path!r}'})",
        announced=True,
    )  # fmt: skip
    try:
        result = original(*args, **kwargs)
    except Exception as exc:
        # vLLM's own reload failed (flag off too: e.g. its AMX MLA path on a tiny DeepSeek-V3
        # target). Whatever it left in the rows, the head is proven from them as they are, the
        # boot keeps that record, and the caller gets vLLM's exception, as with the flag off.
        update, w.session = w.session, None
        update["detail"] += (
            f" raised in vLLM ({type(exc).__name__}: {exc}); the head proven from the rows as "
            "the failed reload left them"
        )
        try:
            w.prove(update, folder=None)
        except Exception as unproven:  # vLLM's exception is the one the caller must see
            w.fall_back(update, f"no proof after vLLM's failed reload ({unproven})")
        raise
    update, w.session = w.session, None
    # From a folder (the one named, else the model's own): that folder's tensor vouches.
    folder = None if from_iterator else (path or w.vllm_config.model_config.model)
    w.prove(update, folder=folder if w.plan.head.when == AT_SHARE else w.plan.checkpoint_dir)
    return result


def _start(w: Watch, model: str, original: Any, *args: Any, **kwargs: Any) -> Any:
    if model == DRAFT and w.plan.family.draft_updates_refused:
        exc = HeadFp8EligibilityError(
            draft_update_refused(w.plan.family.title, w.plan.family.draft_updates_refused)
        )
        announce_refused_call("start_draft_weight_update", exc)
        raise exc
    result = original(*args, **kwargs)
    w.session = w.note(
        "weight_transfer", model, f"weight-transfer session of the {model}", announced=True
    )
    return result


def _finish(w: Watch, original: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        result = original(*args, **kwargs)
    finally:
        update, w.session = w.session, None
    if update is not None:
        # The target's update leaves a drafter's own head as its checkpoint had it.
        own_head_untouched = update["model"] == TARGET and w.plan.head.when != AT_SHARE
        w.prove(update, folder=w.plan.checkpoint_dir if own_head_untouched else None)
    return result


def _wake_up(w: Watch, original: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(*args, **kwargs)
    update = w.note("wake_up", None, "wake_up after sleep: the weights as restored",
                    announced=True)  # fmt: skip
    w.prove(update, folder=None)
    return result


def _shutdown(w: Watch, original: Any, *args: Any, **kwargs: Any) -> Any:
    if not getattr(w, "ended", False):  # once: vLLM may shut a worker down twice
        w.ended = True
        update_proof.keep_serving_record(w)
    return original(*args, **kwargs)


def _load_weights(w: Watch, model: str, original: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(*args, **kwargs)
    if w.session is None and w.unproven is None:  # inside an announced update: proven at its end
        w.unproven = w.note(
            "load_weights", model, f"{model} load_weights outside any announced update",
            announced=False,
        )  # fmt: skip
    return result
