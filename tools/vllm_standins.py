"""Stand-ins for vLLM's classes: modules shaped like vLLM's, for the unit tests and benchmarks
that exercise receipt capture without an engine (test and bench support, not the package).
Named like vLLM's classes because the receipt records class names only; the real classes run in
the engine tests."""

from __future__ import annotations

import torch
from torch import nn


class PerTensorTorchFP8ScaledMMLinearKernel:
    pass


class Fp8PerTensorOnlineLinearMethod:
    def __init__(self) -> None:
        self.fp8_linear = PerTensorTorchFP8ScaledMMLinearKernel()


class UnquantizedEmbeddingMethod:
    pass


class ParallelLMHead(nn.Module):
    def __init__(
        self,
        weight: torch.Tensor,
        scale: torch.Tensor,
        *,
        method: object | None = None,
        tp_size: int = 1,
        hidden: int,
        vocab: int,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)
        self.quant_method = method
        self.tp_size = tp_size
        self.input_size_per_partition = hidden
        self.output_size_per_partition = vocab


class TargetLM(nn.Module):
    """A Gemma-style target language model: its head is tied to its embedding."""

    def __init__(self, embed: nn.Module) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = embed
        self.lm_head = nn.Module()
        self.lm_head.weight = embed.weight  # tied, as Gemma's target head is
        self.lm_head.quant_method = UnquantizedEmbeddingMethod()
