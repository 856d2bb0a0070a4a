"""Reading an assistant checkpoint without loading it: its config (for ``check``) and the raw bytes
of one safetensors tensor (for provenance). No torch, no vLLM: the safetensors format is an 8-byte
little-endian header length, a JSON header of ``{name: {dtype, shape, data_offsets}}``, then data.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

_READ_BYTES = 16 * 1024 * 1024


class CheckpointError(ValueError):
    """The checkpoint folder cannot tell what we need (missing, unreadable, not a drafter...)."""


def read_config(model_dir: str | os.PathLike) -> dict:
    path = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir():
        raise CheckpointError(f"{model_dir}: no such folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{model_dir}: no config.json; is this a Hugging Face model folder?"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read it as JSON ({exc})") from None


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """The safetensors header of ``path`` and the file offset where tensor data starts."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * 1024 * 1024:
            raise CheckpointError(f"{path}: implausible safetensors header length {length}")
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path}: unreadable safetensors header ({exc})") from None
    return header, 8 + length


def safetensors_files(model_dir: str | os.PathLike) -> list[Path]:
    folder = Path(model_dir)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        return [folder / name for name in sorted(set(weight_map.values()))]
    return sorted(folder.glob("*.safetensors"))


def find_tensor(model_dir: str | os.PathLike, name: str) -> tuple[Path, dict, int]:
    """(file, header entry, data start) of tensor ``name`` in the folder's safetensors files."""
    files = safetensors_files(model_dir)
    if not files:
        raise CheckpointError(f"{model_dir}: no .safetensors files")
    for path in files:
        header, data_start = read_header(path)
        if name in header:
            return path, header[name], data_start
    raise CheckpointError(f"{model_dir}: no tensor {name!r} in {[p.name for p in files]}")


def _row_span(entry: dict, rows: tuple[int, int] | None) -> tuple[int, int, list[int] | None]:
    """The byte span [begin, end) of a tensor's rows ``[start, stop)`` (all rows if None)."""
    begin, end = entry["data_offsets"]
    if rows is None:
        return begin, end, None
    shape = entry.get("shape") or []
    start, stop = rows
    if not shape or not 0 <= start <= stop <= shape[0]:
        raise CheckpointError(f"rows {list(rows)} are not inside a tensor of shape {shape}")
    row_bytes = (end - begin) // shape[0] if shape[0] else 0
    return begin + start * row_bytes, begin + stop * row_bytes, [start, stop]


def has_tensor(model_dir: str | os.PathLike, name: str) -> bool:
    try:
        find_tensor(model_dir, name)
    except CheckpointError:
        return False
    return True


def tensor_bytes_sha256(
    model_dir: str | os.PathLike, name: str, *, rows: tuple[int, int] | None = None
) -> dict[str, Any]:
    """SHA-256 of tensor ``name``'s bytes exactly as stored in the checkpoint file; of its rows
    ``[start, stop)`` only when ``rows`` is given (a tensor-parallel shard), read from disk
    without the rest."""
    path, entry, data_start = find_tensor(model_dir, name)
    begin, end, span = _row_span(entry, rows)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(data_start + begin)
        remaining = end - begin
        while remaining:
            block = f.read(min(_READ_BYTES, remaining))
            if not block:
                raise CheckpointError(f"{path}: truncated inside tensor {name!r}")
            digest.update(block)
            remaining -= len(block)
    facts = {
        "file": path.name,
        "tensor": name,
        "dtype": entry.get("dtype"),
        "shape": entry.get("shape"),
        "sha256": digest.hexdigest(),
    }
    if span is not None:
        facts["rows"] = span
    return facts


def resolve_model_dir(model: str, revision: str | None = None) -> Path:
    """A local folder for ``model``: a path, or a hub id already in the local cache (never a
    download)."""
    if os.path.isdir(model):
        return Path(model)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, revision=revision, local_files_only=True))
    except Exception as exc:
        raise CheckpointError(
            f"cannot find the files of {model!r} locally to prove where the draft head's bytes "
            f"come from ({type(exc).__name__}); pass a local folder as the assistant model"
        ) from None


_SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def tensor_sha256_as(
    model_dir: str | os.PathLike,
    torch_dtype: Any,
    name: str,
    *,
    rows: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """SHA-256 of tensor ``name`` (its ``rows`` only, if given) as the engine holds it in
    ``torch_dtype``: the stored bytes when the dtypes agree, else the rows converted a bounded
    piece at a time (vLLM casts on load)."""
    facts = tensor_bytes_sha256(model_dir, name, rows=rows)
    if _SAFETENSORS_DTYPES.get(facts["dtype"]) == str(torch_dtype).removeprefix("torch."):
        return facts
    import torch
    from safetensors import safe_open

    from draft_head_fp8.fp8 import CHUNK_ELEMENTS

    path = Path(model_dir) / facts["file"]
    digest = hashlib.sha256()
    with safe_open(path, framework="pt") as f:
        piece = f.get_slice(name)
        first, stop = facts.get("rows") or (0, facts["shape"][0])
        width = max(1, int(facts["shape"][1]) if len(facts["shape"]) > 1 else 1)
        step = max(1, CHUNK_ELEMENTS // width)
        for start in range(first, stop, step):
            block = piece[start : min(start + step, stop)].to(torch_dtype).contiguous()
            digest.update(memoryview(block.view(-1).view(torch.uint8).numpy()))
    return {**facts, "sha256": digest.hexdigest(), "converted_from": facts["dtype"]}
