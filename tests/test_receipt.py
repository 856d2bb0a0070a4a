"""Receipt capture (docs/contract.md, "Receipt v2") from real CPU torch modules: a BF16 embedding
shared between draft and target, a ``float8_e4m3fn`` head weight stored ``[hidden, vocab]`` (the
``.t()`` of a contiguous ``[vocab, hidden]`` tensor) and an FP32 ``[1]`` scale.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from draft_head_fp8 import (  # noqa: E402
    EXPECTED_ONLINE_SPEC,
    HeadFp8EligibilityError,
    eligibility,
    make_runtime_receipt,
    schemas,
    validate_post_share_receipt,
)
from draft_head_fp8.evidence.snapshot import tensor_snapshot  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from tools import vllm_standins as standins  # noqa: E402
from tools.vllm_standins import (  # noqa: E402
    Fp8PerTensorOnlineLinearMethod,
    TargetLM,
    UnquantizedEmbeddingMethod,
)

H, V = 64, 512
KEYS = [
    "schema",
    "phase",
    "eligible",
    "eligibility_reason",
    "role",
    "prefix",
    "ordered_embeddings",
    "tie_word_embeddings",
    "quant_spec",
    "head_class",
    "head_method",
    "head_method_module",
    "head_kernel",
    "head_tp_size",
    "draft_config_hidden_size",
    "draft_config_vocab_size",
    "head_partition_hidden_size",
    "head_partition_vocab_size",
    "head_expected_weight_shape",
    "head_weight",
    "head_weight_scale",
    "draft_embed",
    "target_embed",
    "target_lm_head_weight",
    "head_weight_is_draft_embed",
    "head_weight_is_target_embed",
    "draft_embed_weight_is_target_embed",
    "draft_embedding_method",
    "target_embedding_method",
    "target_lm_head_method",
]


class ParallelLMHead(standins.ParallelLMHead):
    """The stand-in head at this test's sizes."""

    def __init__(self, weight, scale, *, method=None, tp_size=1, hidden=H, vocab=V):
        super().__init__(weight, scale, method=method, tp_size=tp_size, hidden=hidden, vocab=vocab)


def embedding(weight=None):
    emb = nn.Embedding(V, H, dtype=torch.bfloat16)
    if weight is not None:
        emb.weight = weight
    emb.quant_method = UnquantizedEmbeddingMethod()
    return emb


class TargetModel(nn.Module):
    """A multimodal wrapper: the language model sits behind get_language_model()."""

    def __init__(self, lm):
        super().__init__()
        self.language_model = lm

    def get_language_model(self):
        return self.language_model


def decision(**overrides):
    kwargs = dict(
        layer=None,
        quant_config=SimpleNamespace(args=SimpleNamespace(linear=EXPECTED_ONLINE_SPEC)),
        role="draft",
        prefix="draft_model.lm_head",
        enabled=True,
        ordered_embeddings=False,
        tie_word_embeddings=True,
        parallel_lm_head_class=ParallelLMHead,
        parallel_lm_head_type=nn.Module,
    )
    kwargs.update(overrides)
    return eligibility(**kwargs)


def build(seed=0):
    """A correct post-share state: the draft's BF16 embedding was replaced by the target's, and
    the draft head holds its own FP8 copy of the (formerly tied) embedding."""
    gen = torch.Generator().manual_seed(seed)
    draft_source = torch.randn(V, H, generator=gen).to(torch.bfloat16)
    q = quantize_per_tensor(draft_source)
    assert q.weight.is_contiguous() and list(q.weight.shape) == [V, H]
    head = ParallelLMHead(q.weight.t(), q.scale, method=Fp8PerTensorOnlineLinearMethod())
    target_embed = embedding()
    target = TargetModel(TargetLM(target_embed))
    draft = nn.Module()
    draft.model = nn.Module()
    draft.model.embed_tokens = target_embed  # shared after load
    draft.config = SimpleNamespace(text_config=SimpleNamespace(hidden_size=H, vocab_size=V))
    return SimpleNamespace(head=head, draft=draft, target=target, target_embed=target_embed, q=q)


def receipt_of(state, **kwargs):
    args = dict(
        head=state.head,
        draft_model=state.draft,
        target_model=state.target,
        decision=decision(),
        phase="post_share",
    )
    args.update(kwargs)
    return make_runtime_receipt(**args)


def refusal(receipt):
    try:
        validate_post_share_receipt(receipt)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------- the whole receipt


def test_receipt_from_real_modules_is_valid():
    state = build()
    receipt = receipt_of(state)
    assert list(receipt) == KEYS  # exactly the 30 keys
    assert len(receipt) == 30
    assert refusal(receipt) is None
    assert schemas.errors("runtime-receipt-v2", receipt) == []
    assert json.loads(json.dumps(receipt)) == receipt  # plain JSON, no tensors


def test_receipt_values():
    state = build()
    r = receipt_of(state, phase="post_share")
    w, s, e = state.head.weight, state.head.weight_scale, state.target_embed.weight
    assert r["schema"] == "draft-head-fp8-runtime-receipt/v2"
    assert r["phase"] == "post_share"
    assert r["eligible"] is True and r["eligibility_reason"] == "eligible"
    assert r["role"] == "draft" and r["prefix"] == "draft_model.lm_head"
    assert r["ordered_embeddings"] is False and r["tie_word_embeddings"] is True
    assert r["quant_spec"] == "fp8_per_tensor_static"
    assert r["head_class"] == f"{__name__}.ParallelLMHead"
    assert r["head_method"] == "Fp8PerTensorOnlineLinearMethod"
    assert r["head_method_module"] == standins.__name__
    assert r["head_kernel"] == "PerTensorTorchFP8ScaledMMLinearKernel"
    assert r["head_tp_size"] == 1
    assert (r["draft_config_hidden_size"], r["draft_config_vocab_size"]) == (H, V)
    assert (r["head_partition_hidden_size"], r["head_partition_vocab_size"]) == (H, V)
    assert r["head_expected_weight_shape"] == [H, V]
    assert r["head_weight"] == {
        "dtype": "torch.float8_e4m3fn",
        "shape": [H, V],
        "device": "cpu",
        "numel": H * V,
        "finite": True,
        "data_ptr": w.data_ptr(),
    }
    assert r["head_weight_scale"] == {
        "dtype": "torch.float32",
        "shape": [1],
        "device": "cpu",
        "numel": 1,
        "finite": True,
        "positive_scalar": True,
        "data_ptr": s.data_ptr(),
    }
    embed_snapshot = {
        "dtype": "torch.bfloat16",
        "shape": [V, H],
        "device": "cpu",
        "numel": V * H,
        "data_ptr": e.data_ptr(),
    }
    # no finiteness for the embeddings
    assert r["draft_embed"] == r["target_embed"] == r["target_lm_head_weight"] == embed_snapshot
    assert r["head_weight_is_draft_embed"] is False
    assert r["head_weight_is_target_embed"] is False
    assert r["draft_embed_weight_is_target_embed"] is True
    assert (
        r["draft_embedding_method"] == r["target_embedding_method"] == "UnquantizedEmbeddingMethod"
    )
    assert r["target_lm_head_method"] == "UnquantizedEmbeddingMethod"


def test_decision_fields_are_copied():
    state = build()
    d = decision(
        enabled=False,
        prefix="x.lm_head",
        quant_config=None,
        ordered_embeddings=True,
        tie_word_embeddings=False,
    )
    r = receipt_of(state, decision=d, phase="pre_share")
    assert r["phase"] == "pre_share"
    assert r["eligible"] is False
    assert r["eligibility_reason"] == "experiment flag is disabled"
    assert (r["prefix"], r["ordered_embeddings"], r["tie_word_embeddings"], r["quant_spec"]) == (
        "x.lm_head",
        True,
        False,
        None,
    )
    assert refusal(r) == "receipt is not eligible"


# ---------------------------------------------------------------- finiteness of the FP8 weight


@pytest.mark.parametrize("byte", [0x7F, 0xFF], ids=["nan+", "nan-"])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_nan_byte_in_fp8_weight_is_not_finite(byte, where):
    state = build()
    raw = state.q.weight.view(torch.uint8).view(-1)  # the contiguous [vocab, hidden] storage
    index = {"start": 0, "middle": raw.numel() // 2 + 3, "end": raw.numel() - 1}[where]
    raw[index] = byte
    assert (
        torch.isnan(state.head.weight.float()).sum() == 1
    )  # the head sees it ([hidden, vocab] view)
    r = receipt_of(state)
    assert r["head_weight"]["finite"] is False
    assert refusal(r) == "head FP8 weight/scale is not finite"


@pytest.mark.parametrize("byte", [0x7E, 0xFE, 0x80, 0x00, 0x01, 0x81])
def test_extreme_but_finite_fp8_bytes(byte):
    # 0x7E/0xFE are +-448 (e4m3fn has no inf), 0x80 is -0: all finite.
    state = build()
    state.q.weight.view(torch.uint8).view(-1)[-1] = byte
    assert receipt_of(state)["head_weight"]["finite"] is True


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, torch.float8_e5m2])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", [0, 1, -1], ids=["start", "middle", "end"])
def test_nonfinite_in_other_dtypes(dtype, bad, where):
    t = torch.randn(V, H).to(dtype)
    assert tensor_snapshot(t, finite=True)["finite"] is True
    flat = t.view(-1)
    index = {0: 0, 1: flat.numel() // 2 + 5, -1: flat.numel() - 1}[where]
    flat[index] = bad
    assert tensor_snapshot(t, finite=True)["finite"] is False
    assert tensor_snapshot(t.t(), finite=True)["finite"] is False  # the transposed view too


def test_nonfinite_in_a_non_dense_view_counts_only_its_own_elements():
    base = torch.randn(V, 2 * H).to(torch.bfloat16)
    view = base[:, ::2]
    base[:, 1::2] = math.nan  # outside the view
    assert tensor_snapshot(view, finite=True)["finite"] is True
    base[V - 1, 2 * H - 2] = math.inf  # the view's last element
    assert tensor_snapshot(view, finite=True)["finite"] is False


def test_nan_in_head_weight_scale_and_bf16_head():
    state = build()
    state.head.weight_scale.data.fill_(math.nan)
    r = receipt_of(state)
    assert r["head_weight_scale"]["finite"] is False
    assert r["head_weight_scale"]["positive_scalar"] is False
    assert refusal(r) == "head FP8 weight/scale is not finite"


def test_finite_attribute_is_honoured_and_unreadable_gives_none():
    assert tensor_snapshot(SimpleNamespace(finite=0), finite=True)["finite"] is False
    assert tensor_snapshot(SimpleNamespace(finite="yes"), finite=True)["finite"] is True
    t = torch.tensor([math.nan])
    t_with_attr = SimpleNamespace(dtype=t.dtype, shape=t.shape, finite=True)
    assert tensor_snapshot(t_with_attr, finite=True)["finite"] is True
    odd = SimpleNamespace(dtype="torch.float32", shape=[2])  # no numel(): the check cannot run
    snap = tensor_snapshot(odd, finite=True, positive_scalar=True)
    assert snap == {
        "dtype": "torch.float32",
        "shape": [2],
        "device": None,
        "finite": None,
        "positive_scalar": None,
    }


def test_snapshot_of_none_and_without_finite():
    assert tensor_snapshot(None, finite=True, positive_scalar=True) is None
    t = torch.zeros(3, 2)
    snap = tensor_snapshot(t)
    assert snap == {
        "dtype": "torch.float32",
        "shape": [3, 2],
        "device": "cpu",
        "numel": 6,
        "data_ptr": t.data_ptr(),
    }


# ---------------------------------------------------------------- the scale


@pytest.mark.parametrize(
    "scale, positive",
    [
        (torch.tensor([0.5]), True),
        (torch.tensor([1e-30]), True),
        (torch.tensor(0.5), True),  # 0-d: one element (validation still wants shape [1])
        (torch.tensor([[0.5]]), True),
        (torch.tensor([0.0]), False),
        (torch.tensor([-0.0]), False),
        (torch.tensor([-1.0]), False),
        (torch.tensor([math.nan]), False),
        (torch.tensor([math.inf]), False),
        (torch.tensor([0.5, 0.5]), False),
        (torch.tensor([]), False),
        (torch.tensor([0.5], dtype=torch.bfloat16), True),
    ],
)
def test_positive_scalar(scale, positive):
    assert tensor_snapshot(scale, positive_scalar=True)["positive_scalar"] is positive


@pytest.mark.parametrize(
    "values, message",
    [
        ([0.0], "head scale is not one finite positive scalar"),
        ([-0.25], "head scale is not one finite positive scalar"),
        ([0.5, 0.5], "head scale is not one finite positive scalar"),
        ([math.nan], "head FP8 weight/scale is not finite"),
        ([math.inf], "head FP8 weight/scale is not finite"),
    ],
)
def test_bad_scale_in_receipt(values, message):
    state = build()
    state.head.weight_scale = nn.Parameter(
        torch.tensor(values, dtype=torch.float32), requires_grad=False
    )
    r = receipt_of(state)
    assert r["head_weight_scale"]["positive_scalar"] is False
    assert refusal(r) == message


def test_positive_attribute_is_honoured():
    assert (
        tensor_snapshot(SimpleNamespace(positive=1), positive_scalar=True)["positive_scalar"]
        is True
    )
    assert (
        tensor_snapshot(SimpleNamespace(positive=None), positive_scalar=True)["positive_scalar"]
        is False
    )


def test_tensor_methods_are_not_recorded_facts():
    # torch.Tensor has a `positive` method (torch.positive): it states nothing about the scale.
    zero = torch.tensor([0.0])
    assert callable(zero.positive)
    assert tensor_snapshot(zero, positive_scalar=True)["positive_scalar"] is False
    zero_param = nn.Parameter(torch.tensor([0.0]), requires_grad=False)
    assert (
        tensor_snapshot(zero_param, finite=True, positive_scalar=True)["positive_scalar"] is False
    )


# ---------------------------------------------------------------- aliasing by identity


def test_tied_head_aliases_draft_and_target_embedding():
    state = build()
    # Before quantization the head is tied to the embedding: the same Parameter object.
    state.head.weight = state.target_embed.weight
    r = receipt_of(state)
    assert r["head_weight_is_draft_embed"] is True
    assert r["head_weight_is_target_embed"] is True
    assert refusal(r) is not None


def test_head_aliases_only_the_draft_embedding():
    state = build()
    draft_embed = embedding()
    state.draft.model.embed_tokens = draft_embed  # not shared
    state.head.weight = draft_embed.weight
    r = receipt_of(state)
    assert r["head_weight_is_draft_embed"] is True
    assert r["head_weight_is_target_embed"] is False
    assert r["draft_embed_weight_is_target_embed"] is False


def test_head_aliases_only_the_target_embedding():
    state = build()
    state.draft.model.embed_tokens = embedding()
    state.head.weight = state.target_embed.weight
    r = receipt_of(state)
    assert (r["head_weight_is_draft_embed"], r["head_weight_is_target_embed"]) == (False, True)


def test_clone_of_the_embedding_is_not_an_alias():
    state = build()
    clone = embedding(nn.Parameter(state.target_embed.weight.detach().clone(), requires_grad=False))
    assert torch.equal(clone.weight, state.target_embed.weight)  # equal values...
    state.draft.model.embed_tokens = clone
    r = receipt_of(state)
    assert r["draft_embed_weight_is_target_embed"] is False  # ...but not the same object
    assert refusal(r) == "draft input embedding was not shared with target"
    # A head holding an equal-valued copy of an embedding is not an alias either.
    state = build()
    state.head.weight = nn.Parameter(
        state.target_embed.weight.detach().clone(), requires_grad=False
    )
    r = receipt_of(state)
    assert (r["head_weight_is_draft_embed"], r["head_weight_is_target_embed"]) == (False, False)


def test_missing_pieces_give_false_flags_and_none_snapshots():
    state = build()
    del state.draft.model.embed_tokens
    r = receipt_of(state)
    assert r["draft_embed"] is None
    assert r["draft_embedding_method"] is None
    assert r["draft_embed_weight_is_target_embed"] is False
    assert r["head_weight_is_draft_embed"] is False
    head = SimpleNamespace()  # no weight, no scale, no method
    r = receipt_of(state, head=head)
    assert r["head_weight"] is None and r["head_weight_scale"] is None
    assert r["head_weight_is_target_embed"] is False
    assert r["head_tp_size"] is None
    assert r["head_partition_hidden_size"] is None and r["head_partition_vocab_size"] is None
    assert r["head_class"] == "types.SimpleNamespace"
    assert refusal(r) == "only TP1 is supported by this prototype"


def test_head_method_none():
    state = build()
    state.head.quant_method = None
    r = receipt_of(state)
    assert r["head_method"] is None
    assert r["head_method_module"] == "builtins"
    assert r["head_kernel"] is None
    assert refusal(r) == "unexpected online head method"
    assert schemas.errors("runtime-receipt-v2", r) == []


def test_method_without_kernel():
    state = build()
    state.head.quant_method = SimpleNamespace()
    r = receipt_of(state)
    assert (r["head_method"], r["head_method_module"], r["head_kernel"]) == (
        "SimpleNamespace",
        "types",
        None,
    )


# ---------------------------------------------------------------- where things are found


def test_get_language_model_is_honoured():
    state = build()
    decoy = embedding()
    # The wrapper's own attributes are decoys: only get_language_model() counts.
    state.target.model = nn.Module()
    state.target.model.embed_tokens = decoy
    state.target.lm_head = nn.Module()
    state.target.lm_head.weight = nn.Parameter(
        torch.zeros(2, dtype=torch.float8_e4m3fn), requires_grad=False
    )
    r = receipt_of(state)
    assert r["target_embed"]["data_ptr"] == state.target_embed.weight.data_ptr()
    assert r["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    assert r["draft_embed_weight_is_target_embed"] is True


def test_target_without_get_language_model_is_the_language_model():
    state = build()
    lm = state.target.language_model
    r = receipt_of(state, target_model=lm)
    assert r["draft_embed_weight_is_target_embed"] is True
    assert r["target_lm_head_method"] == "UnquantizedEmbeddingMethod"
    # A flat model (no .model): the body is the model itself.
    flat = SimpleNamespace(embed_tokens=state.target_embed, lm_head=lm.lm_head)
    r = receipt_of(state, target_model=flat)
    assert r["draft_embed_weight_is_target_embed"] is True
    assert refusal(r) is None


def test_draft_without_model_attribute_is_its_own_body():
    state = build()
    flat_draft = SimpleNamespace(embed_tokens=state.target_embed, config=state.draft.config)
    r = receipt_of(state, draft_model=flat_draft)
    assert r["draft_embed_weight_is_target_embed"] is True
    assert refusal(r) is None


def test_empty_module_containers_are_not_skipped():
    # An empty ModuleList is falsy: it must still be taken as the body, not skipped over.
    state = build()
    body = nn.ModuleList()
    object.__setattr__(body, "embed_tokens", state.target_embed)  # not a registered child
    assert not body
    draft = SimpleNamespace(model=body, config=state.draft.config, embed_tokens=embedding())
    r = receipt_of(state, draft_model=draft)
    assert r["draft_embed_weight_is_target_embed"] is True


def test_target_lm_head_argument_overrides():
    state = build()

    class Fp8LinearMethod:
        pass

    explicit = nn.Module()
    explicit.weight = nn.Parameter(torch.zeros(V, H, dtype=torch.float16), requires_grad=False)
    explicit.quant_method = Fp8LinearMethod()
    r = receipt_of(state, target_lm_head=explicit)
    assert r["target_lm_head_weight"]["dtype"] == "torch.float16"
    assert r["target_lm_head_weight"]["data_ptr"] == explicit.weight.data_ptr()
    assert r["target_lm_head_method"] == "Fp8LinearMethod"
    assert refusal(r) == "target LM head is not BF16"
    explicit.quant_method = Fp8PerTensorOnlineLinearMethod()
    assert (
        refusal(receipt_of(state, target_lm_head=explicit))
        == "target LM head was routed to draft FP8 method"
    )


# ---------------------------------------------------------------- config dimensions


@pytest.mark.parametrize(
    "value, expected",
    [
        (H, H),
        (str(H), H),
        (float(H), H),
        (torch.tensor(H), H),
        (0, None),
        (-3, None),
        ("-3", None),
        ("abc", None),
        (None, None),
        ([H], None),
        (math.inf, None),
        (math.nan, None),
    ],
)
def test_config_dimension(value, expected):
    state = build()
    state.draft.config = SimpleNamespace(
        text_config=SimpleNamespace(hidden_size=value, vocab_size=V)
    )
    r = receipt_of(state)
    assert r["draft_config_hidden_size"] == expected
    assert r["draft_config_vocab_size"] == V
    # Without a config dimension the expected shape falls back to the partition size.
    assert r["head_expected_weight_shape"] == [H, V]
    if expected is None:
        assert refusal(r) == "draft config dimensions are missing"


def test_text_config_wins_over_config():
    state = build()
    state.draft.config = SimpleNamespace(
        hidden_size=999, vocab_size=999, text_config=SimpleNamespace(hidden_size=H, vocab_size=V)
    )
    r = receipt_of(state)
    assert (r["draft_config_hidden_size"], r["draft_config_vocab_size"]) == (H, V)
    state.draft.config = SimpleNamespace(hidden_size=H, vocab_size=V, text_config=None)
    r = receipt_of(state)
    assert (r["draft_config_hidden_size"], r["draft_config_vocab_size"]) == (H, V)
    assert refusal(r) is None


def test_expected_shape_prefers_config_then_partition_then_none():
    state = build()
    state.draft.config = SimpleNamespace(hidden_size=H * 2, vocab_size=V)
    r = receipt_of(state)
    assert r["head_expected_weight_shape"] == [H * 2, V]  # config first, never hard-coded
    assert refusal(r) == "head hidden partition does not match draft config"
    state.draft.config = None
    r = receipt_of(state)
    assert (r["draft_config_hidden_size"], r["draft_config_vocab_size"]) == (None, None)
    assert r["head_expected_weight_shape"] == [H, V]
    del state.head.input_size_per_partition
    r = receipt_of(state)
    assert r["head_partition_hidden_size"] is None
    assert r["head_expected_weight_shape"] is None
    assert refusal(r) == "draft config did not provide head dimensions"


def test_partition_sizes_are_ints():
    state = build()
    state.head.input_size_per_partition = torch.tensor(H)
    state.head.output_size_per_partition = str(V)
    r = receipt_of(state)
    assert (r["head_partition_hidden_size"], r["head_partition_vocab_size"]) == (H, V)
    assert type(r["head_partition_hidden_size"]) is int
    state.head.output_size_per_partition = "many"
    assert receipt_of(state)["head_partition_vocab_size"] is None


def test_tp_size_is_recorded():
    state = build()
    state.head.tp_size = 2
    r = receipt_of(state)
    assert r["head_tp_size"] == 2
    assert refusal(r) == "only TP1 is supported by this prototype"


def test_untransposed_fp8_weight_is_refused():
    state = build()
    state.head.weight = nn.Parameter(state.q.weight, requires_grad=False)  # [vocab, hidden]
    r = receipt_of(state)
    assert r["head_weight"]["shape"] == [V, H]
    assert refusal(r) == "processed head shape does not match [hidden, vocab] logical shape"


def test_bf16_head_is_refused_as_not_fp8():
    state = build()
    state.head.weight = nn.Parameter(torch.randn(H, V).to(torch.bfloat16), requires_grad=False)
    assert refusal(receipt_of(state)) == "head weight is not an FP8 dtype"


def test_receipt_holds_no_weight_values():
    state = build()
    text = json.dumps(receipt_of(state))
    assert len(text) < 4000
