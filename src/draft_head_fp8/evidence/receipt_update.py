"""Receipt v4: the draft head proven again after a weight update (docs/contract.md, "Receipt v4").

A v4 receipt is a v3 receipt of the head as it now serves (every v3 key, with v3's meaning; phase
``post_update``) plus what only a later proof can say:

- ``proof``: its number within the boot (the start-up proof is the boot itself);
- ``weight_update``: which update it follows (kind, model, whether vLLM announced it, the
  engine's count of updates so far);
- ``head_source``: where the BF16 bytes the FP8 copy was made from came from: a checkpoint
  tensor (folder, tensor, rows, sha256) where the update named one, else the update itself, with
  the sha256 of the rows as received; ``head_rows_sha256``: that hash, taken from the rows now;
- ``target_lm_head_sha256`` / ``target_embed_sha256``: the target's head and embedding as the
  update left them, hashed before and after the plugin's work: ``target_written_by_plugin``
  says whether they differ (never, in a valid receipt);
- ``serving``: ``fp8`` (the FP8 head and the exact pick) or ``bf16_rows`` (the head's own BF16
  rows, exact, where the FP8 head was refused after the update), and why;
- ``target_lm_head_serves_its_weight``: whether the target's head, through vLLM's own method,
  computes what its weight tensor holds (False after an in-place write vLLM did not post-process:
  on a CPU its GEMM keeps a prepared copy; the target then serves its old head, with or without
  the flag). A fact, not a check: it is the target's state, not the plugin's.
"""

from __future__ import annotations

from typing import Any

RECEIPT_V4 = "draft-head-fp8-runtime-receipt/v4"
POST_UPDATE = "post_update"
SERVING_FP8, SERVING_BF16_ROWS = "fp8", "bf16_rows"
FROM_CHECKPOINT, FROM_UPDATE = "checkpoint", "weight_update"

V4_KEYS = (
    "proof",
    "weight_update",
    "head_source",
    "head_rows_sha256",
    "target_lm_head_sha256",
    "target_embed_sha256",
    "target_written_by_plugin",
    "serving",
    "serving_reason",
    "target_lm_head_serves_its_weight",
)


def update_facts(
    *, number: int, kind: str, model: str | None, announced: bool, detail: str
) -> dict:
    """What the engine was told (or saw) of one weight update."""
    return {
        "number": number,
        "kind": kind,
        "model": model,
        "announced": announced,
        "detail": detail,
    }


def checkpoint_source(checkpoint: dict, folder: str) -> dict:
    """The head's bytes are a checkpoint tensor's (``checkpoint.tensor_sha256_as``'s record)."""
    return {
        "kind": FROM_CHECKPOINT,
        "folder": folder,
        "tensor": checkpoint.get("tensor"),
        "rows": checkpoint.get("rows"),
        "sha256": checkpoint.get("sha256"),
    }


def update_source(update: int, rows_sha256: str) -> dict:
    """The head's bytes arrived with weight update ``update``: no file vouches for them."""
    return {"kind": FROM_UPDATE, "update": update, "sha256": rows_sha256}


def extend_to_v4(
    v3: dict,
    *,
    proof: int,
    weight_update: dict,
    head_source: dict,
    head_rows_sha256: str,
    target_before: tuple[str | None, str | None],
    target_after: tuple[str | None, str | None],
    serving: str,
    serving_reason: str | None,
    target_lm_head_serves_its_weight: bool | None = None,
) -> dict:
    """A v3 receipt of the re-proven head made v4 (``target_*``: (head, embedding) sha256 before
    and after the plugin's work)."""
    return {
        **v3,
        "schema": RECEIPT_V4,
        "phase": POST_UPDATE,
        "proof": proof,
        "weight_update": weight_update,
        "head_source": head_source,
        "head_rows_sha256": head_rows_sha256,
        "target_lm_head_sha256": target_after[0],
        "target_embed_sha256": target_after[1],
        "target_written_by_plugin": target_before != target_after,
        "serving": serving,
        "serving_reason": serving_reason,
        "target_lm_head_serves_its_weight": target_lm_head_serves_its_weight,
    }


def summary(receipt: Any) -> dict:
    """The few facts ``archive show`` and the probe print of a later proof."""
    r = receipt if isinstance(receipt, dict) else {}
    update = r.get("weight_update") or {}
    source = r.get("head_source") or {}
    return {
        "proof": r.get("proof"),
        "update": update.get("kind"),
        "model": update.get("model"),
        "announced": update.get("announced"),
        "source": source.get("kind"),
        "serving": r.get("serving"),
        "serving_reason": r.get("serving_reason"),
    }
