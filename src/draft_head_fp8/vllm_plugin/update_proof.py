"""One later proof: after a weight update (``updates``), the draft head re-made from the rows as
they now are, its receipt v4 captured and validated, the ranks checked against each other again,
and the proof kept as the next sealed record of the boot (``archive.proofs``). A head that cannot
be served in FP8 after the update serves its own BF16 rows from the next call, and the record
says why: nothing is lost, and no FP8 pick is made from bytes a receipt does not describe."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm.logger import init_logger

from draft_head_fp8.errors import HeadFp8EligibilityError, ProofNotKept
from draft_head_fp8.evidence import RANKS_PATH, diagnostics, diagnostics_path, receipt_path
from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.evidence.exact_pick import pick_record
from draft_head_fp8.evidence.receipt import capture
from draft_head_fp8.evidence.receipt_update import (
    POST_UPDATE,
    SERVING_BF16_ROWS,
    SERVING_FP8,
    checkpoint_source,
    extend_to_v4,
    update_source,
)
from draft_head_fp8.evidence.receipt_v3 import extend_to_v3
from draft_head_fp8.evidence.several_heads import HEADS
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.fp8 import NonFiniteHeadError, tensor_sha256
from draft_head_fp8.vllm_plugin import launch, layer_heads, shared_head

logger = init_logger(f"vllm.{__name__}")


def _hash(module: Any) -> str | None:
    weight = getattr(module, "weight", None)
    return None if weight is None else tensor_sha256(weight)


def _target_hashes(modules: Any) -> tuple[str | None, str | None]:
    return _hash(modules.target_head), _hash(modules.target_embed)


def target_head_serves_its_weight(modules: Any) -> bool | None:
    """Whether the target's head, through vLLM's own method, computes what its weight tensor
    holds: on a CPU vLLM's BF16 GEMM keeps a prepared copy of the rows (oneDNN), which an
    in-place ``load_weights`` without vLLM's post-processing leaves behind (the target then
    serves the old head, flag on or off). One small product, read only: a fixed hidden state
    through the head's method against float32 sums over its weight."""
    import torch

    head = modules.target_head
    weight = getattr(head, "weight", None)
    method = getattr(head, "quant_method", None)
    if weight is None or method is None or weight.dim() != 2:
        return None
    x = torch.randn(1, weight.shape[1], generator=torch.Generator().manual_seed(0))
    x = x.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        served = method.apply(head, x).float()
        held = (x.float() @ weight.float().t()).to(weight.dtype).float()
    width = min(served.shape[-1], held.shape[-1])
    scale = held[..., :width].abs().max().clamp_min(1e-30)
    return bool(((served[..., :width] - held[..., :width]).abs().max() / scale) < 2**-5)


def expected_files(where: Any) -> list[str]:
    """What one node's record of a later proof holds before it is sealed."""
    files = [
        path(rank, POST_UPDATE) for rank in where.ranks for path in (receipt_path, diagnostics_path)
    ]
    return files + ([RANKS_PATH] if where.tp_size > 1 and 0 in where.ranks else [])


def _receipt(modules: Any, decision: Any, **v4: Any) -> dict:
    head = modules.head
    method = head.quant_method
    v2 = capture(modules, head=head, decision=decision, phase=POST_UPDATE)
    v3 = extend_to_v3(v2, head, layout=method.weight_layout, stored_scale=method.stored_scale)
    return extend_to_v4(v3, **v4)


def prove(w: Any, update: dict, folder: Any) -> None:
    """Prove ``w``'s head again after ``update``; ``folder``: the checkpoint that vouches for
    the rows (None: the update's own bytes, hashed as received)."""
    modules = w.modules()
    head = modules.head
    method = head.quant_method
    rank, tp_size = int(getattr(head, "tp_rank", 0)), int(getattr(head, "tp_size", 1))
    number = w.proofs + 1
    receipt, pick, refused = _remade_heads(w, modules, update, folder, number)
    consistent = receipt["target_lm_head_serves_its_weight"]
    failure = refused or receipt_verdict(receipt)
    record = diagnostics.record(
        phase=POST_UPDATE, rank=rank, family=w.plan.family.name,
        target_class=f"{type(modules.target).__module__}.{type(modules.target).__name__}",
        head=method.diagnostics, exact_pick=pick, failure=failure, runner=None,
        certificate=method.certificate_record(),
    )  # fmt: skip
    proof, not_kept = _begin(w, number, update)
    if tp_size > 1:
        keep = None if proof is None else (lambda ranks: proof.add_bytes(
            RANKS_PATH, document_bytes(ranks)
        ))  # fmt: skip
        failure = launch.cross_check(
            rank=rank, tp_size=tp_size, failure=failure, receipt=receipt, record=record,
            pick=pick, keep_ranks=keep,
        )  # fmt: skip
    if failure is not None and receipt["serving"] == SERVING_FP8:
        w.serve_bf16_rows(failure)  # a rank that failed, or its peers: every head
        for each in [receipt, *(item["receipt"] for item in receipt.get(HEADS, ()))]:
            each.update(serving=SERVING_BF16_ROWS, serving_reason=failure)
        record["validation"] = {"passed": False, "reason": failure}
    not_kept = not_kept or _keep_all(proof, rank, receipt, record)
    launch.in_node_turns(w.where, lambda: proof is not None and proof.seal_if_complete())
    w.proofs = number
    _announce(update, number, receipt, failure, rank, tp_size, proof)
    if consistent is False:
        logger.warning(
            "draft-head-fp8: after weight update %d the target's head does not compute what its "
            "weight holds (vLLM's prepared GEMM copy was not refreshed: an in-place write without "
            "vLLM's post-processing); the target keeps serving its old head, with the flag or "
            "without; the FP8 draft head follows the weight as written",
            update["number"],
        )  # fmt: skip
    if not_kept is not None:
        raise not_kept


def _remade_heads(
    w: Any, modules: Any, update: dict, folder: Any, number: int
) -> tuple[dict, dict, Any]:
    """Every head made again (``_remade``): its receipt v4 (with every head's, ``heads``, where
    the drafter keeps one per draft layer), the first head's exact pick, the first refusal."""
    refusals: list[Any] = []

    def receipt_of(one: Any, decision: Any) -> dict:
        tensor = None
        if layer_heads.several(w.plan):
            tensor = dict(layer_heads.heads(w.plan, one.drafter))[one.draft_heads[0][0]].tensor
        receipt, refused = _remade(w, one, update, folder, number, decision, tensor)
        refusals.append(refused)
        return receipt

    receipt, pick = layer_heads.receipt_and_pick(modules, w.plan, receipt_of)
    return receipt, pick, next((r for r in refusals if r is not None), None)


def _remade(
    w: Any, modules: Any, update: dict, folder: Any, number: int, decision: Any,
    tensor: str | None = None,
) -> tuple[dict, Any]:  # fmt: skip
    """The FP8 copy made again from the rows as they now are, and its receipt v4; the reason
    it was refused (the BF16 rows then serve from the next call), else None. ``tensor``: the
    head's own checkpoint tensor, where the drafter keeps several."""
    head = modules.head
    method = head.quant_method
    rows = w._rows() if tensor is None else method.source_rows
    before = _target_hashes(modules)
    refused = None
    try:
        method.remake(head, rows, checkpoint_source=w.checkpoint(folder, head, tensor))
    except (HeadFp8EligibilityError, NonFiniteHeadError) as exc:
        refused = str(exc)
        method.serve_bf16_rows(head, rows, refused)  # from the next call: exact, no FP8 byte read
    after = _target_hashes(modules)
    made = method.diagnostics if refused is None else {}
    rows_sha256 = made.get("source_sha256") or tensor_sha256(rows, rows=method.real_rows)
    source = (
        checkpoint_source(made["checkpoint"], str(folder))
        if made.get("checkpoint")
        else update_source(update["number"], rows_sha256)
    )
    if refused is not None:
        decision = replace(decision, eligible=False, reason=refused)
    receipt = _receipt(
        modules, decision, proof=number, weight_update=update, head_source=source,
        head_rows_sha256=rows_sha256, target_before=before, target_after=after,
        serving=SERVING_FP8 if refused is None else SERVING_BF16_ROWS, serving_reason=refused,
        target_lm_head_serves_its_weight=target_head_serves_its_weight(modules),
    )  # fmt: skip
    return receipt, refused


def _begin(w: Any, number: int, update: dict) -> tuple[Any, ProofNotKept | None]:
    from draft_head_fp8.archive import ArchiveError
    from draft_head_fp8.archive.proofs import begin_proof

    try:
        proof = launch.in_node_turns(
            w.where,
            lambda: begin_proof(
                w.boot, number, expected_files=expected_files(w.where), update=update
            ),  # fmt: skip
        )
    except (OSError, ArchiveError) as exc:
        return None, ProofNotKept(f"cannot archive the proof after weight update: {exc}")
    return proof, None


def _keep_all(proof: Any, rank: int, receipt: dict, record: dict) -> ProofNotKept | None:
    from draft_head_fp8.archive import ArchiveError

    if proof is None:
        return None
    try:
        proof.add_bytes(receipt_path(rank, POST_UPDATE), document_bytes(receipt))
        proof.add_bytes(diagnostics_path(rank, POST_UPDATE), document_bytes(record))
    except (OSError, ArchiveError) as exc:
        return ProofNotKept(f"cannot archive the proof after weight update: {exc}")
    return None


def _announce(
    update: dict, number: int, receipt: dict, failure: str | None, rank: int, tp_size: int,
    proof: Any,
) -> None:  # fmt: skip
    where = "not archived" if proof is None else f"archived in {proof.path}"
    source = receipt["head_source"]
    said = (
        f"checkpoint {source['folder']} {source['tensor']}"
        if source["kind"] == "checkpoint"
        else f"weight update {source['update']}, sha256 {source['sha256'][:16]}"
    )
    if failure is None:
        logger.info(
            "draft-head-fp8: weight update %d (%s): proof %d passed (v4, rank %d of %d): FP8 head "
            "re-made from %s; %s",
            update["number"], update["detail"], number, rank, tp_size, said, where,
        )  # fmt: skip
    else:
        logger.warning(
            "draft-head-fp8: weight update %d (%s): the FP8 head is refused (rank %d of %d): %s; "
            "the head's BF16 rows serve every draft-head call (exact); proof %d %s",
            update["number"], update["detail"], rank, tp_size, failure, number, where,
        )  # fmt: skip


SERVING = "serving"  # the phase of the end-of-serving record's diagnostics
END_OF_SERVING = "end_of_serving"


def keep_serving_record(w: Any) -> None:
    """At the worker's shutdown, the boot's last record: each rank's diagnostics with the
    certified pick's counts over the whole boot (how many draft rows each stage decided). The
    engine is going down: nothing raised here may stop that, and no rank waits for another."""
    from draft_head_fp8.archive import ArchiveError
    from draft_head_fp8.archive.proofs import begin_proof

    try:
        modules = w.modules()
        head = modules.head
        method = head.quant_method
        rank = int(getattr(head, "tp_rank", 0))
        detail = "the engine shut down: the certified pick's counts of this boot"
        update = {"number": w.updates, "kind": END_OF_SERVING, "model": None, "announced": True,
                  "detail": detail}  # fmt: skip
        files = [diagnostics_path(r, SERVING) for r in w.where.ranks]
        proof = begin_proof(w.boot, w.proofs + 1, expected_files=files, update=update)
        pick = pick_record(
            method=method, modules=modules, draft_sample_method=w.plan.draft_sample_method,
            rows_source=shared_head.rows_source(w.plan.head),
        )  # fmt: skip
        record = diagnostics.record(
            phase=SERVING, rank=rank, family=w.plan.family.name,
            target_class=f"{type(modules.target).__module__}.{type(modules.target).__name__}",
            head=method.diagnostics, exact_pick=pick, failure=method.fallback_reason,
            runner=None, certificate=method.certificate_record(),
        )  # fmt: skip
        proof.add_bytes(diagnostics_path(rank, SERVING), document_bytes(record))
        proof.seal_if_complete()
    except (OSError, ArchiveError, RuntimeError, AttributeError, TypeError) as exc:
        logger.warning("draft-head-fp8: the end-of-serving record was not kept: %s", exc)
