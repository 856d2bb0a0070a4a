"""Which of vLLM's FP8 kernels serves the draft head: vLLM's own choice, restricted to kernels
whose result the receipt can prove.
"""

from __future__ import annotations

from vllm.model_executor.kernels.linear import (
    _POSSIBLE_FP8_KERNELS,
    choose_scaled_mm_linear_kernel,
)
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearLayerConfig,
)
from vllm.platforms import current_platform

from draft_head_fp8.policy import HeadFp8EligibilityError

# vLLM's FP8 kernels whose processed weight stays the plain FP8 [hidden, vocab] matrix with one
# [1] scale (their process_weights_after_loading does nothing, or pads only dims that are not a
# multiple of 16). Others repack it (the CPU AMX kernel into VNNI tiles with a block scale, Marlin,
# ...), and the receipt could no longer prove shape, dtype and scale. Kernels vLLM adds later are
# left out until someone reads them: the receipt would refuse them anyway.
LAYOUT_KEEPING_KERNELS = frozenset(
    {
        "FlashInferFP8ScaledMMLinearKernel",
        "CutlassFP8ScaledMMLinearKernel",
        "PerTensorTorchFP8ScaledMMLinearKernel",
        "ChannelWiseTorchFP8ScaledMMLinearKernel",
    }
)


def choose_head_kernel(config: FP8ScaledMMLinearLayerConfig) -> tuple[type, str | None]:
    """vLLM's own kernel choice, in vLLM's order of preference, over the layout-keeping kernels.

    Returns the kernel class and the name vLLM would have chosen without the restriction.
    """
    platform_kernels = _POSSIBLE_FP8_KERNELS.get(current_platform._enum, [])
    try:
        unrestricted = choose_scaled_mm_linear_kernel(
            config, _POSSIBLE_FP8_KERNELS, quantization="fp8_w8a8"
        ).__name__
    except ValueError:
        unrestricted = None
    kept = [k for k in platform_kernels if k.__name__ in LAYOUT_KEEPING_KERNELS]
    try:
        chosen = choose_scaled_mm_linear_kernel(
            config, {current_platform._enum: kept}, quantization="fp8_w8a8"
        )
    except ValueError as exc:
        raise HeadFp8EligibilityError(
            f"no FP8 kernel that keeps the [hidden, vocab] layout the receipt proves can run here "
            f"(tried {[k.__name__ for k in kept]}; vLLM says: {exc})"
        ) from None
    return chosen, unrestricted
