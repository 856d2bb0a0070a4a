"""What a drafter's FP8 head will be, decided at construction and carried to where it is made
(at load or at the share): the family, the settings, where its bytes must come from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import Family, HeadSource
from draft_head_fp8.vllm_plugin import seams

# vLLM's names, where the seams table says this release keeps them.
OnlineQuantizationConfig = seams.read("online_quantization_config")
resolve_quantization_config = seams.read("resolve_quantization_config")


@dataclass(frozen=True)
class HeadPlan:
    family: Family
    head: HeadSource  # the head this draft reads (its family's, for its checkpoint)
    rescore_k: int  # the exact pick's top-k; 0 = plain FP8 logits
    cpu_kernel: str  # settings.cpu_kernel()
    bf16_from: str | int  # settings.bf16_from()
    checkpoint_dir: Path  # the folder whose safetensors hold the head's bytes
    serving_dtype: Any  # the dtype vLLM serves the drafter in
    draft_sample_method: str  # "greedy" unless vLLM was asked otherwise
    certify: bool = True  # settings.certify(): each pick certified, or only rescored
    head_kernel: str = "auto"  # settings.head_kernel(): the fused kernel, or vLLM's
    top_k: int | None = None  # the head's best tokens the drafter reads (``Family.top_k``)


def fp8_head_quant_config() -> OnlineQuantizationConfig:
    """The scheme the head gets, described the way vLLM describes its own online schemes:
    ``--quantization fp8_per_tensor``, whose linear spec prints ``fp8_per_tensor_static``."""
    return OnlineQuantizationConfig(resolve_quantization_config("fp8_per_tensor", None))
