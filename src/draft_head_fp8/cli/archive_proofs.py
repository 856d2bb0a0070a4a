"""``archive show``'s later records: each proof a weight update left in the boot, in order, with
every rank's verdict read from its receipt (the exact reason where the FP8 head was refused), and
the end-of-serving record with the certified pick's counts of the whole boot."""

from __future__ import annotations

import json
from typing import Any

from draft_head_fp8.archive import ArchiveError
from draft_head_fp8.archive.proofs import list_proofs, proof_folder
from draft_head_fp8.evidence.receipt_update import summary
from draft_head_fp8.evidence.verdict import receipt_verdict


def proofs_of(boot: Any) -> list[dict]:
    """The boot's later proofs, each with ``ranks``: every rank's verdict and what served."""
    found = list_proofs(boot)
    for proof in found:
        ranks = []
        for path in proof["files"]:
            if not path.startswith("receipts/"):
                continue
            try:
                receipt = json.loads(boot.read_bytes(f"{proof_folder(proof['proof'])}/{path}"))
            except (OSError, ValueError, ArchiveError):
                continue
            verdict = receipt_verdict(receipt)
            ranks.append({
                "rank": receipt.get("tp_rank"),
                "valid": verdict is None,
                # The exact reason the FP8 head was refused, where it was; else the check's.
                "reason": None if verdict is None else (receipt.get("serving_reason") or verdict),
                **summary(receipt),
            })  # fmt: skip
        proof["ranks"] = ranks
        proof["counts"] = _counts(boot, proof)
    return found


def _counts(boot: Any, proof: dict) -> dict | None:
    """Draft rows by certificate stage, summed over the ranks' end-of-serving diagnostics."""
    total: dict[str, int] = {}
    for path in proof["files"]:
        if not path.startswith("diagnostics/serving-rank"):
            continue
        try:
            record = json.loads(boot.read_bytes(f"{proof_folder(proof['proof'])}/{path}"))
        except (OSError, ValueError, ArchiveError):
            continue
        for stage, rows in ((record.get("certificate") or {}).get("counts") or {}).items():
            total[stage] = total.get(stage, 0) + int(rows)
    return total or None


def print_proofs(proofs: list[dict]) -> None:
    if not proofs:
        return
    print(f"  later records ({len(proofs)}: a proof after each weight update, in order):")
    for proof in proofs:
        update = proof["update"] or {}
        if update.get("kind") == "end_of_serving":
            counts = proof["counts"] or {}
            said = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
            print(f"    {proof['proof']:>4}  {proof['status']:<10}  end of serving: draft rows "
                  f"by certificate stage: {said or 'none recorded'}")  # fmt: skip
            continue
        said = "; ".join(
            f"rank {r['rank']}: "
            + ("FP8 head proven" if r["valid"] else f"{r['serving']} serve: {r['reason']}")
            for r in proof["ranks"]
        )
        print(
            f"    {proof['proof']:>4}  {proof['status']:<10}  update {update.get('number')} "
            f"{update.get('kind')} ({update.get('model') or 'weights'}"
            f"{'' if update.get('announced') else ', not announced'}): {said or 'no receipt'}"
        )
