"""The FP8 head method's load step on real CPU tensors: provenance, refusal, the untouched source.

The vLLM kernel is replaced by a recorder here (these are unit tests of the load logic); the real
kernel runs in tests/test_engine.py.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
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
    method = object.__new__(DraftHeadFp8LinearMethod)  # no vLLM config needed for the load logic
    method.fp8_linear = RecordingKernel()
    method.vllm_default_kernel = "CPUFp8PerTensorScaledMMLinearKernel"
    method.diagnostics = {}
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
    from vllm.model_executor.kernels.linear import _POSSIBLE_FP8_KERNELS

    known = {k.__name__ for kernels in _POSSIBLE_FP8_KERNELS.values() for k in kernels}
    assert (
        LAYOUT_KEEPING_KERNELS <= known
    )  # a rename in vLLM must fail here, not silently shrink the set
