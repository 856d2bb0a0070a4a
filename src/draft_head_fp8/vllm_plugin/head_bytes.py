"""The head's bytes: hashed against the checkpoint they must be, quantized with the whole head's
per-tensor scale (one all-reduce at TP N), and what vouches for them. The head method asks this at
start-up and after every weight update alike (``head_method``'s one path)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from draft_head_fp8.checkpoint import tensor_sha256_as
from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.fp8 import QuantizedHead, head_amax, quantize_per_tensor, tensor_sha256
from draft_head_fp8.vllm_plugin import seams


@dataclass(frozen=True)
class Made:
    """A head's FP8 copy and what vouches for it, made side by side (``hash_and_quantize``)."""

    source_sha256: str  # of the loaded bytes, real rows only
    checkpoint: dict | None  # the checkpoint tensor's hash record, None without a source
    quantized: QuantizedHead
    amax_local: float  # this rank's shard's amax (the scale uses the whole head's)
    hashed: float  # perf_counter() once the loaded bytes were hashed
    quantized_at: float  # ... and once they were quantized


def _whole_head_amax(local: float, layer: torch.nn.Module) -> float:
    """The largest |w| over every rank's shard: one per-tensor scale for the whole head."""
    if int(getattr(layer, "tp_size", 1)) == 1:
        return local
    import torch.distributed as dist

    amax = torch.tensor([local], dtype=torch.float32)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=seams.read("tp_group")().cpu_group)
    return float(amax[0])


def _check_padding(source: torch.Tensor, real_rows: int) -> None:
    # vLLM zero-fills the rows past the vocabulary; anything else there was not loaded by it.
    padding = source[real_rows:]
    if padding.numel() and bool(padding.any()):
        raise HeadFp8EligibilityError(
            f"draft head shard has non-zero padding rows past its {real_rows} real rows; "
            "refusing to quantize bytes that are not the checkpoint's"
        )


def checkpoint_of(folder: Any, head: torch.nn.Module, dtype: torch.dtype, tensor: str) -> Any:
    """What vouches for a head's bytes: the hash of ``tensor`` in the checkpoint ``folder``, this
    rank's real rows only (at TP N each rank holds a vocab shard), computed when asked."""
    indices = head.shard_indices
    return partial(
        tensor_sha256_as, folder, dtype, tensor,
        rows=(indices.org_vocab_start_index, indices.org_vocab_end_index),
    )  # fmt: skip


def hash_and_quantize(
    layer: torch.nn.Module, source: torch.Tensor, real: int, checkpoint_source: Any
) -> Made:
    """This rank's rows hashed (real rows only) and quantized with the whole head's scale, beside
    the checkpoint's hash (``checkpoint_source``; None: no file vouches)."""
    # The checkpoint is hashed on a second thread (hashlib releases the GIL) while this one
    # hashes and quantizes the loaded bytes; nothing is installed until both hashes agree.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(checkpoint_source) if checkpoint_source else None
        source_sha256 = tensor_sha256(source, rows=real)
        hashed = time.perf_counter()
        _check_padding(source, real)
        local_amax = head_amax(source)
        amax = _whole_head_amax(local_amax, layer)
        quantized = quantize_per_tensor(source, amax=amax, real_rows=real)
        quantized_at = time.perf_counter()
        checkpoint = pending.result() if pending is not None else None
    return Made(source_sha256, checkpoint, quantized, local_amax, hashed, quantized_at)


def check_checkpoint(made: Made, owner: str) -> None:
    """Refuse bytes that are not the ``owner``'s checkpoint's (nothing is installed yet)."""
    checkpoint = made.checkpoint
    if checkpoint is not None and checkpoint["sha256"] != made.source_sha256:
        rows = f" rows {checkpoint['rows']}" if checkpoint.get("rows") else ""
        raise HeadFp8EligibilityError(
            f"draft head bytes do not match the {owner} checkpoint's "
            f"{checkpoint['tensor']}{rows} ({checkpoint['file']}): sha256 "
            f"{made.source_sha256} != {checkpoint['sha256']}; the head would be quantised "
            "from something else"
        )
