"""Which of vLLM's FP8 kernels serves the draft head, and in which weight layout.

- On a CPU, vLLM's W8A16 op (``torch.ops._C.fp8_scaled_mm_cpu`` on a weight repacked by
  ``convert_weight_packed``): 3-4x faster than the BF16 head, activations stay BF16. vLLM's own
  kernel for it, ``CPUFp8PerTensorScaledMMLinearKernel``, is gated on AMX tiles although the op
  runs on any CPU vLLM ships it for (AVX512-BF16 EPYCs included); ``CPUFp8W8A16HeadKernel`` is
  that same class, its code unchanged, gated on the op instead. Its layout is the packed one,
  which receipt v3 proves.
- A CPU without the op (AVX2, or AVX512 without BF16) has no FP8 head faster than BF16: the
  flag refuses it, unless ``DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm`` asks for the slow path.
- Everywhere else (CUDA; a CPU asked for ``scaled_mm``), vLLM's own choice among the kernels that
  keep the plain ``[hidden, vocab]`` layout with one ``[1]`` scale that receipt v2 proves.

Every kernel is run once on a tiny head before it is chosen (``_op_answers``, ``_kernel_answers``):
a kernel that vLLM or a setting names can still fail on this machine (torch routes FP8 matmuls to
oneDNN by the CPU's flags, and oneDNN may be capped below them), and that must be a refusal that
names the op's own message before vLLM listens, not a traceback from deep inside its load.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
from collections.abc import Callable
from dataclasses import dataclass

import torch

from draft_head_fp8 import certificate
from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.fp8 import quantize_per_tensor
from draft_head_fp8.layouts import K_BLOCK, LAYOUT_PACKED, LAYOUT_PLAIN, k_blocks
from draft_head_fp8.machine import Machine
from draft_head_fp8.policy import SLOW_CPU_PATH, slow_cpu_refusal
from draft_head_fp8.settings import CPU_KERNEL_ENV
from draft_head_fp8.vllm_plugin import fused_kernel, seams

# vLLM's names that move between releases, read where the installed one keeps them.
CPUFp8PerTensorScaledMMLinearKernel = seams.read("cpu_fp8_per_tensor_kernel")
FP8ScaledMMLinearLayerConfig = seams.read("fp8_scaled_mm_layer_config")
choose_scaled_mm_linear_kernel = seams.read("choose_scaled_mm_linear_kernel")
init_fp8_linear_kernel = seams.read("init_fp8_linear_kernel")
current_platform = seams.read("current_platform")

# vLLM's FP8 kernels whose processed weight stays the plain FP8 [hidden, vocab] matrix with one
# [1] scale (their process_weights_after_loading does nothing, or pads only dims that are not a
# multiple of 16). Others repack it (Marlin, the CPU W8A8 kernel, ...) into layouts no receipt
# here describes. Kernels vLLM adds later are left out until someone reads them.
LAYOUT_KEEPING_KERNELS = frozenset(
    {
        "FlashInferFP8ScaledMMLinearKernel",
        "CutlassFP8ScaledMMLinearKernel",
        "PerTensorTorchFP8ScaledMMLinearKernel",
        "ChannelWiseTorchFP8ScaledMMLinearKernel",
    }
)


class CPUFp8W8A16HeadKernel(CPUFp8PerTensorScaledMMLinearKernel):
    """vLLM's ``CPUFp8PerTensorScaledMMLinearKernel`` (its weight packing and its apply, not a
    copy), gated on vLLM advertising the op rather than on AMX tiles."""

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        if not current_platform.is_cpu():
            return False, "requires CPU platform."
        if not seams.read("cpu_fp8_w8a16_supported"):
            return False, machine_as_vllm_sees_it().missing_op()
        return _op_answers()


def machine_as_vllm_sees_it() -> Machine:
    """This CPU's flags as torch reports them, which is what vLLM picked its kernels by."""
    flags = {
        flag
        for flag, present in (
            ("avx2", torch.cpu._is_avx2_supported()),
            ("avx512f", torch.cpu._is_avx512_supported()),
            ("avx512_bf16", torch.cpu._is_avx512_bf16_supported()),
            ("amx_tile", torch.cpu._is_amx_tile_supported()),
        )
        if present
    }
    return Machine(platform.machine(), frozenset(flags), "vllm-cpu")


# The op's N tile: vLLM's packed kernel rounds the output rows up to it (``_block_size_n``).
N_TILE = 32


def packed_w8a16(
    weight: torch.Tensor, scale: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ (weight * scale).t()`` through vLLM's W8A16 op, the weight (FP8,
    ``[vocab, hidden]``, contiguous) packed and its ``[1]`` scale spread over the K blocks the
    way ``CPUFp8PerTensorScaledMMLinearKernel`` does it: what the op is checked and measured by."""
    vocab, hidden = weight.shape
    packed = torch.ops._C.convert_weight_packed(weight)
    block = scale.reshape(()).expand(1, k_blocks(hidden)).contiguous()
    size = [-(-vocab // N_TILE) * N_TILE, K_BLOCK]
    return lambda x: torch.ops._C.fp8_scaled_mm_cpu(x, packed, block, size, None, x.dtype, True)


@functools.cache
def _op_answers() -> tuple[bool, str | None]:
    """Run the op once on a small head and compare it with the dequantized matmul: advertised is
    not proven, and a CPU where it misbehaves must fall back, not serve wrong drafts."""
    try:
        gen = torch.Generator().manual_seed(0)
        # Quantized as the head is. (The op reads a byte whose exponent field is 0, zero and the
        # subnormals, as +-2^-7 (1 + m/8) of the scale, not as its value: off by at most
        # 1.875 * 2^-7 * scale per weight, within this check's tolerance here; the certified
        # pick's bound counts it, certificate.OP_EXPONENT_ZERO_MAX.)
        head = quantize_per_tensor((torch.randn(64, 256, generator=gen) * 0.05).bfloat16())
        x = torch.randn(3, 256, generator=gen).to(torch.bfloat16)
        out = packed_w8a16(head.weight, head.scale)(x)
        reference = (x.float() @ (head.weight.float() * head.scale).t()).to(torch.bfloat16)
        # One BF16 rounding of the same float32 sum: anything further off is not this op.
        if not torch.allclose(out.float(), reference.float(), rtol=2**-7, atol=1e-2):
            return False, "fp8_scaled_mm_cpu disagrees with the dequantized matmul on this CPU"
    except Exception as exc:  # an op that cannot run is a fallback, with its reason
        return False, f"fp8_scaled_mm_cpu did not run here ({type(exc).__name__}: {exc})"
    return True, None


# The tiny head a chosen kernel is run on at start-up: this rank's hidden size, few rows.
PROBE_ROWS = 64


def _kernel_answers(kernel: type, config: FP8ScaledMMLinearLayerConfig) -> str | None:
    """Run ``kernel`` as the head would (vLLM's constructor, its weight processing, its apply)
    on a tiny head of this hidden size and dtype, on this device, against the dequantized
    matmul; why it cannot serve here (its own message), else None."""
    hidden = int(config.weight_shape[1])
    tiny = dataclasses.replace(config, weight_shape=(PROBE_ROWS, hidden))
    device = torch.device(current_platform.device_type)
    try:
        gen = torch.Generator().manual_seed(0)
        head = quantize_per_tensor(torch.randn(PROBE_ROWS, hidden, generator=gen) * 0.05)
        instance = init_fp8_linear_kernel(
            activation_quant_key=tiny.activation_quant_key,
            weight_quant_key=tiny.weight_quant_key,
            weight_shape=tiny.weight_shape,
            input_dtype=tiny.input_dtype,
            out_dtype=tiny.out_dtype,
            force_kernel=kernel,
            module_name="draft-head-fp8 kernel probe",
        )
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(head.weight.t().to(device), requires_grad=False)
        layer.weight_scale = torch.nn.Parameter(head.scale.to(device), requires_grad=False)
        layer.input_scale = None
        instance.process_weights_after_loading(layer)
        x = torch.randn(3, hidden, generator=gen).to(device=device, dtype=tiny.input_dtype)
        out = instance.apply_weights(layer, x).float().cpu()
        reference = x.float().cpu() @ (head.weight.float() * head.scale).t()
    except Exception as exc:  # any failure to run is the refusal's reason, in the op's words
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    # Activations are quantized to FP8 per tensor: a few percent of the largest logit.
    if not torch.allclose(out, reference, rtol=0.1, atol=0.1 * float(reference.abs().max())):
        return "its output disagrees with the dequantized matmul on a tiny head"
    return None


def _probed(choice: KernelChoice, config: FP8ScaledMMLinearLayerConfig) -> KernelChoice:
    why_not = _kernel_answers(choice.kernel, config)
    if why_not is not None:
        asked = f" ({choice.warning.split(':')[0]})" if choice.warning else ""
        raise HeadFp8EligibilityError(
            f"the FP8 head's kernel {choice.kernel.__name__}{asked} does not run on this "
            f"{current_platform.device_type}: {why_not}"
        )
    return choice


@dataclass(frozen=True)
class KernelChoice:
    kernel: type
    layout: str  # LAYOUT_PLAIN or LAYOUT_PACKED, what the receipt will prove
    vllm_default: str | None  # what vLLM would pick for a plain linear of this shape
    warning: str | None  # said at start-up: why this head is slower than it could be
    # The arithmetic the certificate's bound covers (certificate.KERNEL_KINDS), chosen here with
    # the kernel, never guessed later: BF16 activations times exact FP8 weights (vLLM's CPU W8A16
    # op, the fused kernel), or activations quantized to FP8 first (every scaled_mm kernel).
    bound: str = certificate.KERNEL_SCALED_MM


def _cpu_packed(config: FP8ScaledMMLinearLayerConfig) -> tuple[type | None, str | None]:
    """vLLM's own W8A16 kernel where it runs (AMX), else the same code gated on the op; if
    neither, why not (the gated one's reason: it is the one that runs without AMX)."""
    reason = None
    for kernel in (CPUFp8PerTensorScaledMMLinearKernel, CPUFp8W8A16HeadKernel):
        supported, reason = kernel.is_supported()
        if supported:
            possible, reason = kernel.can_implement(config)
            if possible:
                return kernel, None
    return None, reason


def choose_head_kernel(
    config: FP8ScaledMMLinearLayerConfig, *, cpu_kernel: str, head_kernel: str = "vllm",
    certify: bool = True, rescore_k: int = 1,
) -> KernelChoice:  # fmt: skip
    """The head's kernel (``head_kernel``: settings.HEAD_KERNELS): the fused Triton kernel where
    asked (``triton``) or by default on CUDA (``auto``), run once before it is chosen; else on a
    CPU the packed W8A16 one unless ``cpu_kernel`` is ``scaled_mm``, else vLLM's own choice, in
    vLLM's order of preference, over the layout-keeping kernels. ``auto`` on CUDA falls back to
    vLLM's kernels, saying why, where the fused kernel cannot serve; ``triton`` refuses."""
    try:
        unrestricted = choose_scaled_mm_linear_kernel(
            config, seams.read("possible_fp8_kernels"), quantization="fp8_w8a8"
        ).__name__
    except ValueError:
        unrestricted = None
    warning = None
    device = current_platform.device_type
    if head_kernel == "triton" or (head_kernel == "auto" and device == "cuda"):
        why_not = fused_kernel.unavailable(device, certify=certify, rescore_k=rescore_k)
        why_not = why_not or fused_kernel.probe(int(config.weight_shape[1]), torch.device(device))
        if why_not is None:
            return KernelChoice(
                fused_kernel.FusedW8A16HeadKernel, LAYOUT_PLAIN, unrestricted, None,
                bound=certificate.KERNEL_FUSED_W8A16,
            )  # fmt: skip
        if head_kernel == "triton":
            raise fused_kernel.refuse(why_not)
        warning = f"the fused Triton kernel cannot serve here ({why_not}); vLLM's FP8 kernels do"
    if current_platform.is_cpu():
        if cpu_kernel == "auto":
            packed, why_not = _cpu_packed(config)
            if packed is not None:
                return KernelChoice(
                    packed, LAYOUT_PACKED, unrestricted, None, bound=certificate.KERNEL_W8A16
                )
            raise HeadFp8EligibilityError(slow_cpu_refusal(str(why_not).rstrip(".")))
        warning = "; ".join(
            filter(None, [warning, f"{CPU_KERNEL_ENV}={cpu_kernel}: {SLOW_CPU_PATH}"])
        )
    platform = seams.read("platform_enum")
    platform_kernels = seams.read("possible_fp8_kernels").get(platform, [])
    kept = [k for k in platform_kernels if k.__name__ in LAYOUT_KEEPING_KERNELS]
    try:
        chosen = choose_scaled_mm_linear_kernel(config, {platform: kept}, quantization="fp8_w8a8")
    except ValueError as exc:
        raise HeadFp8EligibilityError(
            f"no FP8 kernel whose weight layout a receipt can prove runs here "
            f"(tried {[k.__name__ for k in kept]}; vLLM says: {exc})"
        ) from None
    return _probed(KernelChoice(chosen, LAYOUT_PLAIN, unrestricted, warning), config)
