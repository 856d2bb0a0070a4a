"""The policy (docs/contract.md, "Public names" and "Policy"): env flag, online-spec extraction,
LM-head detection, the eight rules in order with their exact reasons, and the raise rule of
``select_draft_head_method``.

vLLM's real ``ParallelLMHead`` and ``OnlineQuantizationConfig`` are used where the contract names
them; vLLM's import costs several seconds, so it happens once, in module-scoped fixtures.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

import draft_head_fp8.policy as policy
from draft_head_fp8 import (
    EXPECTED_ONLINE_SPEC,
    EXPERIMENT_ENV,
    Eligibility,
    HeadFp8EligibilityError,
    eligibility,
    env_enabled,
    select_draft_head_method,
)

REASONS = [
    "experiment flag is disabled",
    "role is not draft",
    "layer is not ParallelLMHead",
    "prefix is not an LM head",
    None,  # rule 5 depends on the spec: see online_spec_reason()
    "ordered embeddings bypass LogitsProcessor.quant_method.apply",
    "untied draft embedding/head is not served: the FP8 copy is proven only for a head "
    "tied to its embedding or read from the target",
    "custom FP8 head requires head dtype aligned with hidden dtype",
]


def online_spec_reason(spec):
    return f"online spec {spec!r} is not 'fp8_per_tensor_static'"


def quant(linear=EXPECTED_ONLINE_SPEC):
    """A duck-typed quant config shaped like vLLM's: .online_quantization_config.args.linear."""
    return SimpleNamespace(
        online_quantization_config=SimpleNamespace(args=SimpleNamespace(linear=linear))
    )


# A class that passes the name/module test without vLLM: vLLM-independent LM-head stand-in.
FakeNamedHead = type("ParallelLMHead", (), {"__module__": "somewhere.vocab_parallel_embedding"})


class MyHeadType:
    pass


class MyHead(MyHeadType):
    pass


def base_kwargs(**overrides):
    """An eligible request; the head is recognised through an explicit type (no vLLM needed)."""
    kwargs = dict(
        layer=MyHead(),
        quant_config=quant(),
        role="draft",
        prefix="draft.model.lm_head",
        enabled=True,
        ordered_embeddings=False,
        tie_word_embeddings=True,
        head_dtype="torch.bfloat16",
        model_dtype="torch.bfloat16",
        parallel_lm_head_type=MyHeadType,
    )
    kwargs.update(overrides)
    return kwargs


# One violation per rule (index 0 is rule 1). Each is independent of the others.
VIOLATIONS = [
    dict(enabled=False),
    dict(role="target"),
    dict(layer=object()),
    dict(prefix="draft.model.embed_tokens"),
    dict(quant_config=quant("fp8_per_block_static")),
    dict(ordered_embeddings=True),
    dict(tie_word_embeddings=False),
    dict(head_dtype="torch.float16"),
]


def expected_reason(rule_index, kwargs):
    if rule_index == 4:
        return online_spec_reason(policy.online_quant_spec(kwargs["quant_config"]))
    return REASONS[rule_index]


# ---------------------------------------------------------------- env flag


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1", True),
        (" 1 ", True),
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("\tyes\n", True),
        ("YES", True),
        ("0", False),
        ("", False),
        ("   ", False),
        ("on", False),
        ("false", False),
        ("no", False),
        ("2", False),
        ("y", False),
        ("1.0", False),
        ("t", False),
        ("yes please", False),
    ],
)
def test_env_enabled_truth_table(value, expected):
    assert env_enabled({EXPERIMENT_ENV: value}) is expected


def test_env_enabled_missing_and_other_variables():
    assert env_enabled({}) is False
    assert env_enabled({"OTHER": "1", EXPERIMENT_ENV.lower(): "1"}) is False


def test_env_enabled_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv(EXPERIMENT_ENV, " Yes ")
    assert env_enabled() is True
    assert env_enabled(None) is True
    monkeypatch.setenv(EXPERIMENT_ENV, "on")
    assert env_enabled() is False
    monkeypatch.delenv(EXPERIMENT_ENV)
    assert env_enabled() is False
    # An explicit mapping wins over os.environ.
    monkeypatch.setenv(EXPERIMENT_ENV, "1")
    assert env_enabled({}) is False


# ---------------------------------------------------------------- the dataclass and the error


def test_eligibility_is_a_frozen_dataclass_with_spec_field_order():
    assert dataclasses.is_dataclass(Eligibility)
    assert [f.name for f in dataclasses.fields(Eligibility)] == [
        "enabled",
        "eligible",
        "reason",
        "role",
        "prefix",
        "ordered_embeddings",
        "tie_word_embeddings",
        "quant_spec",
    ]
    decision = eligibility(**base_kwargs())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.eligible = False  # type: ignore[misc]
    positional = Eligibility(
        True, True, "eligible", "draft", "lm_head", False, True, EXPECTED_ONLINE_SPEC
    )
    assert positional == decision.__class__(**{**dataclasses.asdict(decision), "prefix": "lm_head"})


def test_error_is_a_value_error():
    assert issubclass(HeadFp8EligibilityError, ValueError)
    with pytest.raises(ValueError, match="boom"):
        raise HeadFp8EligibilityError("boom")


# ---------------------------------------------------------------- rules, first failing wins


def test_baseline_is_eligible():
    decision = eligibility(**base_kwargs())
    assert decision.eligible is True
    assert decision.reason == "eligible"
    assert decision.quant_spec == EXPECTED_ONLINE_SPEC


@pytest.mark.parametrize("rule", range(8), ids=[f"rule{i + 1}" for i in range(8)])
def test_each_rule_alone(rule):
    kwargs = base_kwargs(**VIOLATIONS[rule])
    decision = eligibility(**kwargs)
    assert decision.eligible is False
    assert decision.reason == expected_reason(rule, kwargs)


@pytest.mark.parametrize("rule", range(8), ids=[f"rule{i + 1}" for i in range(8)])
def test_first_failing_rule_wins(rule):
    # Violate this rule and every later one at once: this rule's reason is reported.
    overrides = {}
    for later in VIOLATIONS[rule:]:
        overrides.update(later)
    kwargs = base_kwargs(**overrides)
    decision = eligibility(**kwargs)
    assert decision.eligible is False
    assert decision.reason == expected_reason(rule, kwargs)


@pytest.mark.parametrize(
    "prefix, ok",
    [
        ("lm_head", True),
        ("model.lm_head", True),
        ("draft_model.model.lm_head", True),
        ("model.lm_head.weight", False),
        ("model.embed_tokens", False),
        ("lm_head_extra", False),
        ("model.my_lm_head", False),
        ("", False),
        ("lm_head.", False),
    ],
)
def test_prefix_rule(prefix, ok):
    decision = eligibility(**base_kwargs(prefix=prefix))
    assert decision.reason == ("eligible" if ok else "prefix is not an LM head")


@pytest.mark.parametrize(
    "head_dtype, model_dtype, ok",
    [
        (None, None, True),
        ("torch.float16", None, True),
        (None, "torch.float16", True),
        ("torch.bfloat16", "torch.bfloat16", True),
        ("torch.bfloat16", "torch.float16", False),
        ("torch.bfloat16", "bfloat16", False),  # compared as str(), not by meaning
    ],
)
def test_dtype_rule(head_dtype, model_dtype, ok):
    decision = eligibility(**base_kwargs(head_dtype=head_dtype, model_dtype=model_dtype))
    assert decision.reason == (
        "eligible" if ok else "custom FP8 head requires head dtype aligned with hidden dtype"
    )


def test_dtype_rule_uses_str_of_real_dtypes():
    torch = pytest.importorskip("torch")
    same = eligibility(**base_kwargs(head_dtype=torch.bfloat16, model_dtype="torch.bfloat16"))
    assert same.eligible is True
    differ = eligibility(**base_kwargs(head_dtype=torch.bfloat16, model_dtype=torch.float16))
    assert differ.reason == "custom FP8 head requires head dtype aligned with hidden dtype"


@pytest.mark.parametrize(
    "enabled, role, prefix, ordered, tied",
    [
        (True, "draft", "model.lm_head", False, True),
        (False, "draft", "model.lm_head", False, True),
        (True, "target", "x.lm_head", True, False),
        (1, "draft", "lm_head", 0, 1),  # carried as given, not coerced
        (True, "draft", "model.embed", False, True),
        (True, "draft", "model.lm_head", True, True),
        (True, "draft", "model.lm_head", False, False),
    ],
)
def test_decision_carries_inputs_unchanged(enabled, role, prefix, ordered, tied):
    decision = eligibility(
        **base_kwargs(
            enabled=enabled,
            role=role,
            prefix=prefix,
            ordered_embeddings=ordered,
            tie_word_embeddings=tied,
        )
    )
    assert decision.enabled is enabled
    assert decision.role is role
    assert decision.prefix is prefix
    assert decision.ordered_embeddings is ordered
    assert decision.tie_word_embeddings is tied
    assert decision.quant_spec == EXPECTED_ONLINE_SPEC


def test_decision_carries_extracted_spec_even_when_refused_early():
    decision = eligibility(**base_kwargs(enabled=False, quant_config=quant("fp8_per_block_static")))
    assert decision.reason == "experiment flag is disabled"
    assert decision.quant_spec == "fp8_per_block_static"


# ---------------------------------------------------------------- online spec extraction


class Linear:
    def __str__(self):
        return "fp8_per_tensor_static"


@pytest.mark.parametrize(
    "quant_config, spec",
    [
        (None, None),
        (object(), None),
        (quant(), "fp8_per_tensor_static"),
        (quant(Linear()), "fp8_per_tensor_static"),  # str() of the linear spec
        (quant(7), "7"),
        (quant(None), None),
        # online config without args: its own .linear
        (
            SimpleNamespace(
                online_quantization_config=SimpleNamespace(linear="fp8_per_tensor_static")
            ),
            "fp8_per_tensor_static",
        ),
        # online config None, quant_config itself has args: use it
        (SimpleNamespace(online_quantization_config=None, args=SimpleNamespace(linear="a")), "a"),
        # no online config attribute at all, but args
        (SimpleNamespace(args=SimpleNamespace(linear="b")), "b"),
        # online config None and no args
        (SimpleNamespace(online_quantization_config=None), None),
        # args present but None: its .linear is missing
        (SimpleNamespace(online_quantization_config=SimpleNamespace(args=None)), None),
        # args without linear
        (SimpleNamespace(online_quantization_config=SimpleNamespace(args=SimpleNamespace())), None),
        # online config wins over the quant_config's own args
        (
            SimpleNamespace(
                online_quantization_config=SimpleNamespace(args=SimpleNamespace(linear="online")),
                args=SimpleNamespace(linear="own"),
            ),
            "online",
        ),
    ],
)
def test_online_spec_extraction(quant_config, spec):
    decision = eligibility(**base_kwargs(quant_config=quant_config))
    assert decision.quant_spec == spec
    assert policy.online_quant_spec(quant_config) == spec
    if spec == EXPECTED_ONLINE_SPEC:
        assert decision.eligible is True
    else:
        assert decision.reason == online_spec_reason(spec)


def test_online_spec_reason_uses_repr():
    assert eligibility(**base_kwargs(quant_config=None)).reason == (
        "online spec None is not 'fp8_per_tensor_static'"
    )
    assert eligibility(**base_kwargs(quant_config=quant("fp8"))).reason == (
        "online spec 'fp8' is not 'fp8_per_tensor_static'"
    )


# ---------------------------------------------------------------- LM-head detection, no vLLM


def test_layer_none_without_class_is_not_a_head():
    decision = eligibility(**base_kwargs(layer=None, parallel_lm_head_type=None))
    assert decision.reason == "layer is not ParallelLMHead"
    decision = eligibility(**base_kwargs(layer=None, parallel_lm_head_type=MyHeadType))
    assert decision.reason == "layer is not ParallelLMHead"


@pytest.mark.parametrize(
    "cls, typ, ok",
    [
        (MyHead, MyHeadType, True),
        (MyHeadType, MyHeadType, True),
        (int, MyHeadType, False),
        ("MyHead", MyHeadType, False),  # issubclass raises TypeError -> False
        (MyHead, "MyHeadType", False),  # ditto, the other argument
        (FakeNamedHead, MyHeadType, False),  # the type decides, not the name
    ],
)
def test_layer_none_class_with_type(cls, typ, ok):
    decision = eligibility(
        **base_kwargs(layer=None, parallel_lm_head_class=cls, parallel_lm_head_type=typ)
    )
    assert decision.reason == ("eligible" if ok else "layer is not ParallelLMHead")


@pytest.mark.parametrize(
    "cls, ok",
    [
        (FakeNamedHead, True),
        (
            type(
                "ParallelLMHead",
                (),
                {"__module__": "vllm.model_executor.layers.vocab_parallel_embedding"},
            ),
            True,
        ),
        (type("ParallelLMHead", (), {"__module__": "vocab_parallel_embedding"}), True),
        (type("ParallelLMHead", (), {"__module__": "elsewhere.heads"}), False),
        (type("ParallelLMHead", (), {"__module__": "vocab_parallel_embedding.sub"}), False),
        (type("VocabParallelEmbedding", (), {"__module__": "x.vocab_parallel_embedding"}), False),
        (type("ParallelLMHeadX", (), {"__module__": "x.vocab_parallel_embedding"}), False),
        (MyHead, False),
    ],
)
def test_layer_none_class_without_type_uses_name_and_module(cls, ok):
    decision = eligibility(
        **base_kwargs(layer=None, parallel_lm_head_class=cls, parallel_lm_head_type=None)
    )
    assert decision.reason == ("eligible" if ok else "layer is not ParallelLMHead")


def test_layer_with_type_uses_isinstance():
    assert eligibility(**base_kwargs(layer=MyHead())).eligible is True
    assert eligibility(**base_kwargs(layer=MyHeadType())).eligible is True
    decision = eligibility(**base_kwargs(layer=FakeNamedHead()))  # name does not matter
    assert decision.reason == "layer is not ParallelLMHead"
    # The layer wins over a class argument when both are given.
    decision = eligibility(**base_kwargs(layer=object(), parallel_lm_head_class=MyHead))
    assert decision.reason == "layer is not ParallelLMHead"


def test_layer_without_type_falls_back_to_name_when_vllm_is_absent(monkeypatch):
    monkeypatch.setattr(policy, "_vllm_parallel_lm_head", lambda: None)
    ok = eligibility(**base_kwargs(layer=FakeNamedHead(), parallel_lm_head_type=None))
    assert ok.eligible is True
    for cls in (
        type("ParallelLMHead", (), {"__module__": "elsewhere"}),
        type("LMHead", (), {"__module__": "x.vocab_parallel_embedding"}),
    ):
        refused = eligibility(**base_kwargs(layer=cls(), parallel_lm_head_type=None))
        assert refused.reason == "layer is not ParallelLMHead"
    assert eligibility(**base_kwargs(layer=MyHead(), parallel_lm_head_type=None)).eligible is False


# ---------------------------------------------------------------- vLLM's real classes


@pytest.fixture(scope="module")
def vllm_head_cls():
    mod = pytest.importorskip("vllm.model_executor.layers.vocab_parallel_embedding")
    return mod.ParallelLMHead


@pytest.fixture(scope="module")
def vllm_online_config():
    base = pytest.importorskip("vllm.model_executor.layers.quantization.online.base")
    config = pytest.importorskip("vllm.config.quantization")

    def make(name):
        return base.OnlineQuantizationConfig(config.resolve_quantization_config(name, None))

    return make


def test_real_vllm_parallel_lm_head_without_type(vllm_head_cls):
    # Constructing a real ParallelLMHead needs vLLM's distributed state; isinstance does not.
    layer = object.__new__(vllm_head_cls)
    assert policy._vllm_parallel_lm_head() is vllm_head_cls
    decision = eligibility(**base_kwargs(layer=layer, parallel_lm_head_type=None))
    assert decision.eligible is True

    class DrafterHead(vllm_head_cls):  # a subclass is an LM head too
        def __init__(self):  # never calls vLLM's constructor
            pass

    assert (
        eligibility(**base_kwargs(layer=DrafterHead(), parallel_lm_head_type=None)).eligible is True
    )


def test_real_vllm_refuses_lookalikes_when_vllm_imports(vllm_head_cls):
    # With vLLM importable the check is isinstance against vLLM's class: a name lookalike is
    # refused.
    decision = eligibility(**base_kwargs(layer=FakeNamedHead(), parallel_lm_head_type=None))
    assert decision.reason == "layer is not ParallelLMHead"
    base = vllm_head_cls.__mro__[1]  # VocabParallelEmbedding: an embedding, not a head
    decision = eligibility(**base_kwargs(layer=object.__new__(base), parallel_lm_head_type=None))
    assert decision.reason == "layer is not ParallelLMHead"


def test_real_vllm_class_as_parallel_lm_head_class(vllm_head_cls):
    assert vllm_head_cls.__module__.endswith("vocab_parallel_embedding")
    decision = eligibility(
        **base_kwargs(layer=None, parallel_lm_head_class=vllm_head_cls, parallel_lm_head_type=None)
    )
    assert decision.eligible is True
    decision = eligibility(
        **base_kwargs(
            layer=None, parallel_lm_head_class=vllm_head_cls, parallel_lm_head_type=vllm_head_cls
        )
    )
    assert decision.eligible is True
    decision = eligibility(
        **base_kwargs(
            layer=None,
            parallel_lm_head_class=vllm_head_cls.__mro__[1],
            parallel_lm_head_type=vllm_head_cls,
        )
    )
    assert decision.reason == "layer is not ParallelLMHead"


def test_real_vllm_online_config_per_tensor(vllm_online_config, vllm_head_cls):
    online = vllm_online_config("fp8_per_tensor")
    assert str(online.args.linear) == "fp8_per_tensor_static"
    layer = object.__new__(vllm_head_cls)
    for quant_config in (online, SimpleNamespace(online_quantization_config=online)):
        decision = eligibility(
            **base_kwargs(layer=layer, quant_config=quant_config, parallel_lm_head_type=None)
        )
        assert decision.quant_spec == "fp8_per_tensor_static"
        assert decision.eligible is True


def test_real_vllm_online_config_per_block_is_refused(vllm_online_config, vllm_head_cls):
    online = vllm_online_config("fp8_per_block")
    layer = object.__new__(vllm_head_cls)
    decision = eligibility(
        **base_kwargs(layer=layer, quant_config=online, parallel_lm_head_type=None)
    )
    assert decision.quant_spec == "fp8_per_block_static"
    assert decision.reason == "online spec 'fp8_per_block_static' is not 'fp8_per_tensor_static'"
    with pytest.raises(HeadFp8EligibilityError) as info:
        select_draft_head_method(
            **base_kwargs(layer=layer, quant_config=online, parallel_lm_head_type=None)
        )
    assert str(info.value) == "online spec 'fp8_per_block_static' is not 'fp8_per_tensor_static'"


# ---------------------------------------------------------------- select_draft_head_method


class Factory:
    def __init__(self):
        self.calls = 0
        self.method = object()

    def __call__(self):
        self.calls += 1
        return self.method


def test_select_eligible_calls_factory_once():
    factory = Factory()
    method, decision = select_draft_head_method(**base_kwargs(), method_factory=factory)
    assert method is factory.method
    assert factory.calls == 1
    assert decision == eligibility(**base_kwargs())
    assert decision.eligible is True


@pytest.mark.parametrize("rule", [3, 4, 5, 6, 7], ids=[f"rule{i + 1}" for i in [3, 4, 5, 6, 7]])
def test_select_raises_when_explicitly_requested_head_is_unsafe(rule):
    factory = Factory()
    kwargs = base_kwargs(**VIOLATIONS[rule])
    with pytest.raises(HeadFp8EligibilityError) as info:
        select_draft_head_method(**kwargs, method_factory=factory)
    assert str(info.value) == expected_reason(rule, kwargs)
    assert info.value.args == (expected_reason(rule, kwargs),)
    assert factory.calls == 0


def test_select_raises_for_head_given_by_class():
    with pytest.raises(HeadFp8EligibilityError, match="^prefix is not an LM head$"):
        select_draft_head_method(
            **base_kwargs(layer=None, parallel_lm_head_class=MyHead, prefix="model.head")
        )
    with pytest.raises(HeadFp8EligibilityError, match="^ordered embeddings"):
        select_draft_head_method(
            **base_kwargs(
                layer=None,
                parallel_lm_head_class=FakeNamedHead,
                parallel_lm_head_type=None,
                ordered_embeddings=True,
            )
        )


@pytest.mark.parametrize(
    "overrides, reason",
    [
        # flag off: nothing happens, whatever else is wrong
        (dict(enabled=False), "experiment flag is disabled"),
        (dict(enabled=False, prefix="x.embed", quant_config=None), "experiment flag is disabled"),
        # the target model's head: the normal resolver runs
        (dict(role="target"), "role is not draft"),
        (dict(role="target", ordered_embeddings=True), "role is not draft"),
        # other layers of the draft model
        (dict(layer=object()), "layer is not ParallelLMHead"),
        (dict(layer=object(), quant_config=None), "layer is not ParallelLMHead"),
        (dict(layer=None), "layer is not ParallelLMHead"),
        (dict(layer=None, parallel_lm_head_class=int), "layer is not ParallelLMHead"),
    ],
)
def test_select_returns_none_when_not_an_explicit_request(overrides, reason):
    factory = Factory()
    method, decision = select_draft_head_method(**base_kwargs(**overrides), method_factory=factory)
    assert method is None
    assert decision.eligible is False
    assert decision.reason == reason
    assert factory.calls == 0


def test_select_keywords_only():
    with pytest.raises(TypeError):
        select_draft_head_method(MyHead(), quant(), "draft", "lm_head", True, False, True)  # type: ignore[misc]
    with pytest.raises(TypeError):
        eligibility(MyHead(), quant(), "draft", "lm_head", True, False, True)  # type: ignore[misc]


# ---------------------------------------------------------------- heads of the drafter's families


def test_a_shared_head_draft_with_a_vocabulary_of_its_own_is_refused():
    decision = eligibility(
        **base_kwargs(tie_word_embeddings=False, shared_target_head=True),
        draft_vocab_size=1024,
        vocab_size=2048,
    )
    assert decision.reason == (
        "draft head over its own vocabulary (1024 of the target's 2048 tokens, EAGLE-3 style) is "
        "not served for this drafter: its family proves a head over the target's vocabulary"
    )


@pytest.mark.parametrize(
    "vocabularies, head_dtype, reason",
    [
        ((1024, 2048), "torch.bfloat16", "eligible"),
        # Untied and over a vocabulary of its own: neither the tie rule nor the own-vocabulary one.
        ((32000, 128256), "torch.bfloat16", "eligible"),
        ((2048, 2048), "torch.bfloat16", policy.own_head_over_whole_vocabulary(2048)),
        ((None, 2048), "torch.bfloat16", (
            "draft head of its own without a known draft and target vocabulary size"
        )),
        ((1024, 2048), "torch.float16", (
            "custom FP8 head requires head dtype aligned with hidden dtype"
        )),
    ],
)  # fmt: skip
def test_a_drafters_own_head_rules(vocabularies, head_dtype, reason):
    draft_vocab_size, vocab_size = vocabularies
    decision = eligibility(
        **base_kwargs(tie_word_embeddings=False, head_dtype=head_dtype),
        own_head=True,
        draft_vocab_size=draft_vocab_size,
        vocab_size=vocab_size,
    )
    assert decision.reason == reason and decision.eligible is (reason == "eligible")


def test_a_soft_cap_rounds_a_lower_logit_onto_the_pick():
    """Why a soft-capped draft is refused (``soft_capped_logits``): vLLM's processor caps in the
    logits' dtype, and at cap 30 the BF16 logits 48.0 and 47.75 both become 27.625, so its
    argmax (the first maximum) takes a token the certificate proved below the pick when that
    token's index is the lower."""
    torch = pytest.importorskip("torch")
    from draft_head_fp8.policy import soft_capped_logits

    logits = torch.tensor([[47.75, 48.0]], dtype=torch.bfloat16)  # token 1 is the head's pick
    capped = torch.tanh(logits / 30.0) * 30.0  # LogitsProcessor.forward's three steps
    assert int(logits.argmax(-1)) == 1 and int(capped.argmax(-1)) == 0
    assert soft_capped_logits(30.0).startswith(
        "the draft's logits are soft-capped after the head (soft cap 30: tanh(logits / 30) * 30"
    )
