"""The head method's FP8 copy made again after a weight update (``updates``), in place: the same
per-rank path as at start-up (hash, the whole head's scale, quantize, the certificate's bound,
vLLM's packing), written into the FP8 weight and scale already installed, so that CUDA graphs
captured on them keep reading valid bytes."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn import Parameter

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.diagnostics import head_record
from draft_head_fp8.vllm_plugin import certified_pick


@torch.no_grad()
def remake(
    method: Any, layer: torch.nn.Module, source: torch.Tensor, checkpoint_source: Any = None
) -> None:
    """After a weight update: the FP8 copy made again from ``source`` as it now is (the same
    per-rank path as at start-up: hash, the whole head's scale, quantize, vLLM's packing),
    written into the FP8 weight and scale already installed (CUDA graphs captured on them
    keep reading valid bytes), the exact pick reading ``source``. ``checkpoint_source``: the
    checkpoint the update named, else None (weights that came with the update). Raises
    ``HeadFp8EligibilityError`` (or ``NonFiniteHeadError``) and installs nothing when the
    new bytes cannot be served in FP8; the caller then serves the BF16 rows."""
    method.checkpoint_source = checkpoint_source
    started = time.perf_counter()
    real = method.real_rows if method.real_rows is not None else int(source.shape[0])
    made = method._hash_and_quantize(layer, source, real)
    method._check_checkpoint(made)
    certified_pick.make_bound(method, source, made.quantized)  # before vLLM packs the bytes
    scratch = torch.nn.Module()
    scratch.weight = Parameter(made.quantized.weight.t(), requires_grad=False)
    scratch.weight_scale = Parameter(made.quantized.scale.clone(), requires_grad=False)
    scratch.input_scale = None
    method.fp8_linear.process_weights_after_loading(scratch)  # vLLM's packing, as at load
    for name in ("weight", "weight_scale"):
        mine, new = getattr(layer, name), getattr(scratch, name)
        if mine.shape != new.shape or mine.dtype != new.dtype:
            raise HeadFp8EligibilityError(
                f"the re-made FP8 head's {name} is {new.dtype} {list(new.shape)}, not the "
                f"{mine.dtype} {list(mine.shape)} the engine serves"
            )
        mine.copy_(new)
    method.stored_scale = made.quantized.scale
    method.source_rows = source
    method.rescore_rows = source if method.rescore_k else None
    # Our own BF16 rows are prepared by vLLM's GEMM once (oneDNN keeps a reordered copy):
    # prepared again from the rows as they now are. The target's own head is vLLM's to redo.
    paths = method._choose_paths(layer, source, method.bf16_layer)
    method.fallback_reason = None
    method.diagnostics = head_record(
        source=source, rows_hashed=real, source_sha256=made.source_sha256,
        checkpoint=made.checkpoint, quantized=made.quantized,
        kernel=type(method.fp8_linear).__name__,
        vllm_default_kernel=method.kernel.vllm_default if method.kernel else None,
        seconds={"hash_source": made.hashed - started,
                 "quantize": made.quantized_at - made.hashed,
                 "total_with_checkpoint_hash": time.perf_counter() - started},
        weight_layout=method.weight_layout, amax_local=made.amax_local, batch_paths=paths,
    )  # fmt: skip
