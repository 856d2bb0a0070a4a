"""The FP8 head method: a vLLM quant method for the draft's ``ParallelLMHead`` only.

It is vLLM's online per-tensor FP8 scheme (scale = amax / 448, weight float8_e4m3fn stored
transposed ``[hidden, vocab]``, matmul through vLLM's own FP8 kernel selection) with three
differences that the draft head needs:

- the head keeps its tie to the draft embedding until loading is done, because vLLM never loads
  ``lm_head.weight`` for this drafter: the embedding's bytes are the head's only source;
- quantization is pure torch and bounded in memory, so it runs on the CPU wheel (whose
  ``scaled_fp8_quant`` ops are placeholders) and on CUDA alike;
- the FP8 weight is a new, private Parameter: the BF16 tensor it was made from, which becomes the
  target's embedding after sharing, is never written.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.nn import Parameter
from vllm.config import get_current_vllm_config
from vllm.model_executor.kernels.linear import init_fp8_linear_kernel
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearLayerConfig,
)
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
from vllm.model_executor.layers.quantization.online.fp8 import Fp8PerTensorOnlineLinearMethod
from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8StaticTensorSym

from draft_head_fp8.evidence.diagnostics import head_record
from draft_head_fp8.fp8 import quantize_per_tensor, tensor_sha256
from draft_head_fp8.policy import HeadFp8EligibilityError
from draft_head_fp8.vllm_plugin.kernels import choose_head_kernel
from draft_head_fp8.vllm_plugin.refusal import announce_refusal


class DraftHeadFp8LinearMethod(QuantizeMethodBase):
    """Per-tensor FP8 for the draft LM head. Reports itself under its own name in receipts."""

    # Same activation quantization as vLLM's online per-tensor method, so the same kernel is chosen.
    activation_quant_key = Fp8PerTensorOnlineLinearMethod.activation_quant_key
    weight_quant_key = kFp8StaticTensorSym

    def __init__(self) -> None:
        self.input_dtype = get_current_vllm_config().model_config.dtype
        self.out_dtype = torch.get_default_dtype()
        self.fp8_linear: Any = None
        self.vllm_default_kernel: str | None = None
        # Where the head's bytes must come from; set by the drafter before loading.
        self.checkpoint_source: Any = None  # callable -> {"sha256", "file", "tensor", ...}
        self.diagnostics: dict[str, Any] = {}

    def install(self, head: torch.nn.Module) -> None:
        """Take over a constructed, tied ``ParallelLMHead``: choose the FP8 kernel for its shape.

        The weight stays the tied BF16 embedding Parameter until ``process_weights_after_loading``.
        """
        config = FP8ScaledMMLinearLayerConfig(
            weight_quant_key=self.weight_quant_key,
            activation_quant_key=self.activation_quant_key,
            input_dtype=self.input_dtype,
            out_dtype=self.out_dtype,
            weight_shape=tuple(head.weight.shape),
        )
        kernel, self.vllm_default_kernel = choose_head_kernel(config)
        self.fp8_linear = init_fp8_linear_kernel(
            activation_quant_key=self.activation_quant_key,
            weight_quant_key=self.weight_quant_key,
            weight_shape=tuple(head.weight.shape),
            input_dtype=self.input_dtype,
            out_dtype=self.out_dtype,
            force_kernel=kernel,
            module_name=type(self).__name__,
        )
        head.quant_method = self

    def create_weights(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "DraftHeadFp8LinearMethod is installed on an existing tied head (install()), "
            "not used to create one"
        )

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        if getattr(layer, "_draft_head_fp8_done", False):
            return
        try:
            self._quantize(layer)
        except Exception as exc:
            announce_refusal(exc)
            raise

    @torch.no_grad()
    def _quantize(self, layer: torch.nn.Module) -> None:
        source = layer.weight
        if source.device.type == "meta":
            raise HeadFp8EligibilityError(
                "draft head weight was never loaded (still on the meta device): refusing to "
                "quantize uninitialised memory"
            )
        started = time.perf_counter()
        vocab = int(getattr(layer, "org_vocab_size", source.shape[0]))
        # The checkpoint is hashed on a second thread (hashlib releases the GIL) while this one
        # hashes and quantizes the loaded bytes; nothing is installed until both hashes agree.
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(self.checkpoint_source) if self.checkpoint_source else None
            source_sha256 = tensor_sha256(source, rows=vocab)
            hashed = time.perf_counter()
            quantized = quantize_per_tensor(source)
            quantized_at = time.perf_counter()
            checkpoint = pending.result() if pending is not None else None
        if checkpoint is not None and checkpoint["sha256"] != source_sha256:
            raise HeadFp8EligibilityError(
                "draft head bytes do not match the assistant checkpoint's "
                f"{checkpoint['tensor']} ({checkpoint['file']}): sha256 {source_sha256} != "
                f"{checkpoint['sha256']}; the head would be quantised from something else"
            )
        # A new Parameter, never a copy into the old one: the BF16 source is the draft embedding
        # (which the proposer is about to replace by the target's), and its bytes stay as loaded.
        layer.weight = Parameter(quantized.weight.t(), requires_grad=False)
        layer.weight_scale = Parameter(quantized.scale, requires_grad=False)
        layer.input_scale = None
        self.fp8_linear.process_weights_after_loading(layer)
        layer._draft_head_fp8_done = True
        done = time.perf_counter()
        self.diagnostics = head_record(
            source=source,
            rows_hashed=vocab,
            source_sha256=source_sha256,
            checkpoint=checkpoint,
            quantized=quantized,
            kernel=type(self.fp8_linear).__name__,
            vllm_default_kernel=self.vllm_default_kernel,
            seconds={
                "hash_source": hashed - started,
                "quantize": quantized_at - hashed,
                "total_with_checkpoint_hash": done - started,
            },
        )

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.fp8_linear.apply_weights(layer, x, bias)

    def embedding(self, layer: torch.nn.Module, input_: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the FP8 draft head is an LM head, not an input embedding")
