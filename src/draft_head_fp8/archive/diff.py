"""``archive diff``: two boots compared field by field, their identities and every receipt file
(JSON flattened, the fields people look for first, noise such as pids and pointers last)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .boot import Boot

# Listed first in a diff, in this order; everything else follows alphabetically, then the noise.
_RECEIPT_FIRST = [
    "head_method",
    "head_kernel",
    "head_weight.dtype",
    "head_weight.shape",
    "head_weight_scale.dtype",
    "head_weight_scale.shape",
    "quant_spec",
    "eligible",
    "eligibility_reason",
    "schema",
    "phase",
    "head_class",
    "head_method_module",
    "head_expected_weight_shape",
    "head_tp_size",
    "target_lm_head_method",
    "target_lm_head_weight.dtype",
    "draft_embed.dtype",
    "target_embed.dtype",
]
_IDENTITY_FIRST = [
    "versions.draft-head-fp8",
    "versions.vllm",
    "vllm_distribution",
    "versions.torch",
    "versions.python",
    "device_names",
    "cpu_model",
    "kernel",
    "host",
    "kernel_boot_id",
    "container_id",
    "invocation_id",
]
_NOISE = ("seq", "boot", "launch_id", "started_at", "pid")
_ABSENT = object()


def flatten(obj: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        for i, value in enumerate(obj):
            flatten(value, f"{prefix}[{i}]", out)
    else:
        out[prefix or "(value)"] = obj
    return out


def _key_order(first: list[str]):
    rank = {k: i for i, k in enumerate(first)}

    def key(k: str):
        noisy = k in _NOISE or k.endswith(".data_ptr")
        return (2 if noisy else (0 if k in rank else 1), rank.get(k, 0), k)

    return key


def _diff_json(a: Any, b: Any, first: list[str]) -> list[dict[str, Any]]:
    fa, fb = flatten(a, "", {}), flatten(b, "", {})
    changes = []
    for key in sorted(set(fa) | set(fb), key=_key_order(first)):
        va, vb = fa.get(key, _ABSENT), fb.get(key, _ABSENT)
        if va is _ABSENT or vb is _ABSENT or va != vb or type(va) is not type(vb):
            changes.append(
                {
                    "key": key,
                    "a": None if va is _ABSENT else va,
                    "b": None if vb is _ABSENT else vb,
                    "in_a": va is not _ABSENT,
                    "in_b": vb is not _ABSENT,
                }
            )
    return changes


def diff_boots(a: Boot, b: Boot) -> dict[str, Any]:
    """Field-by-field differences of the identities and of every receipts/ file (JSON flattened)."""

    def receipts(boot: Boot) -> dict[str, bytes]:
        out = {}
        for rel, _ in boot.files():
            if rel.startswith("receipts/"):
                out[rel] = boot.read_bytes(rel)
        return out

    def as_json(data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError:
            return _ABSENT

    result: dict[str, Any] = {
        "a": a.name,
        "b": b.name,
        "identity": _diff_json(a.identity or {}, b.identity or {}, _IDENTITY_FIRST),
        "receipts": [],
    }
    ra, rb = receipts(a), receipts(b)
    for rel in sorted(set(ra) | set(rb)):
        entry: dict[str, Any] = {"path": rel}
        if rel not in ra or rel not in rb:
            entry["only_in"] = "a" if rel in ra else "b"
        else:
            ja, jb = as_json(ra[rel]), as_json(rb[rel])
            if ja is _ABSENT or jb is _ABSENT:
                entry["changes"] = (
                    []
                    if ra[rel] == rb[rel]
                    else [
                        {
                            "key": "(bytes, not JSON)",
                            "a": hashlib.sha256(ra[rel]).hexdigest(),
                            "b": hashlib.sha256(rb[rel]).hexdigest(),
                            "in_a": True,
                            "in_b": True,
                        }
                    ]
                )
            else:
                entry["changes"] = _diff_json(ja, jb, _RECEIPT_FIRST)
        result["receipts"].append(entry)
    return result
