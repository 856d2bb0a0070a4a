"""Policy: may this layer's LM head be served in FP8? Pure decisions, no torch, no vLLM at import.

The rules and their reason strings are a contract (SPEC section 2): people moved here from the
experiment overlay keep matching on them. The first failing rule wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

EXPERIMENT_ENV = "VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8"
EXPECTED_ONLINE_SPEC = "fp8_per_tensor_static"
EXPECTED_METHOD = "Fp8PerTensorOnlineLinearMethod"

_TRUE_VALUES = frozenset({"1", "true", "yes"})


class HeadFp8EligibilityError(ValueError):
    """An explicitly requested FP8 draft head is unsafe, or a receipt failed validation."""


@dataclass(frozen=True)
class Eligibility:
    enabled: bool
    eligible: bool
    reason: str
    role: str
    prefix: str
    ordered_embeddings: bool
    tie_word_embeddings: bool
    quant_spec: str | None


def env_enabled(environ: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(EXPERIMENT_ENV)
    return value is not None and str(value).strip().lower() in _TRUE_VALUES


def online_quant_spec(quant_config: Any) -> str | None:
    """The online linear scheme a quant config describes, as vLLM's CLI shorthand prints it."""
    online = getattr(quant_config, "online_quantization_config", None)
    if online is None and hasattr(quant_config, "args"):
        online = quant_config
    if online is None:
        return None
    args = online.args if hasattr(online, "args") else online
    linear = getattr(args, "linear", None)
    return None if linear is None else str(linear)


def _named_like_parallel_lm_head(cls: Any) -> bool:
    # Without vLLM importable, recognise the class by where vLLM defines it.
    return getattr(cls, "__name__", None) == "ParallelLMHead" and str(
        getattr(cls, "__module__", "")
    ).endswith("vocab_parallel_embedding")


def _vllm_parallel_lm_head() -> type | None:
    try:
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    except Exception:  # vLLM absent or broken: fall back to the name test
        return None
    return ParallelLMHead


def is_lm_head(
    layer: Any,
    parallel_lm_head_type: type | None = None,
    parallel_lm_head_class: type | None = None,
) -> bool:
    if layer is None:
        if parallel_lm_head_class is None:
            return False
        if parallel_lm_head_type is not None:
            try:
                return issubclass(parallel_lm_head_class, parallel_lm_head_type)
            except TypeError:
                return False
        return _named_like_parallel_lm_head(parallel_lm_head_class)
    if parallel_lm_head_type is not None:
        return isinstance(layer, parallel_lm_head_type)
    vllm_type = _vllm_parallel_lm_head()
    if vllm_type is not None:
        return isinstance(layer, vllm_type)
    return _named_like_parallel_lm_head(type(layer))


def _last_component(prefix: Any) -> str:
    return str(prefix).rsplit(".", 1)[-1]


def eligibility(
    *,
    layer: Any,
    quant_config: Any,
    role: str,
    prefix: str,
    enabled: bool,
    ordered_embeddings: bool,
    tie_word_embeddings: bool,
    head_dtype: Any = None,
    model_dtype: Any = None,
    parallel_lm_head_type: type | None = None,
    parallel_lm_head_class: type | None = None,
) -> Eligibility:
    spec = online_quant_spec(quant_config)

    def decide(reason: str) -> Eligibility:
        return Eligibility(
            enabled=enabled,
            eligible=reason == "eligible",
            reason=reason,
            role=role,
            prefix=prefix,
            ordered_embeddings=ordered_embeddings,
            tie_word_embeddings=tie_word_embeddings,
            quant_spec=spec,
        )

    if not enabled:
        return decide("experiment flag is disabled")
    if role != "draft":
        return decide("role is not draft")
    if not is_lm_head(layer, parallel_lm_head_type, parallel_lm_head_class):
        return decide("layer is not ParallelLMHead")
    if _last_component(prefix) != "lm_head":
        return decide("prefix is not an LM head")
    if spec != EXPECTED_ONLINE_SPEC:
        return decide(f"online spec {spec!r} is not {EXPECTED_ONLINE_SPEC!r}")
    if ordered_embeddings:
        # Centroid heads gather rows of lm_head.weight directly; an FP8 weight cannot serve that.
        return decide("ordered embeddings bypass LogitsProcessor.quant_method.apply")
    if not tie_word_embeddings:
        return decide("untied draft embedding/head is outside this alias-safe prototype")
    if head_dtype is not None and model_dtype is not None and str(head_dtype) != str(model_dtype):
        return decide("custom FP8 head requires head dtype aligned with hidden dtype")
    return decide("eligible")


def _default_method_factory() -> Any:
    from draft_head_fp8.vllm_plugin.head_method import DraftHeadFp8LinearMethod

    return DraftHeadFp8LinearMethod()


def select_draft_head_method(
    *,
    layer: Any,
    quant_config: Any,
    role: str,
    prefix: str,
    enabled: bool,
    ordered_embeddings: bool,
    tie_word_embeddings: bool,
    head_dtype: Any = None,
    model_dtype: Any = None,
    parallel_lm_head_type: type | None = None,
    parallel_lm_head_class: type | None = None,
    method_factory: Callable[[], Any] | None = None,
) -> tuple[Any, Eligibility]:
    decision = eligibility(
        layer=layer,
        quant_config=quant_config,
        role=role,
        prefix=prefix,
        enabled=enabled,
        ordered_embeddings=ordered_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        head_dtype=head_dtype,
        model_dtype=model_dtype,
        parallel_lm_head_type=parallel_lm_head_type,
        parallel_lm_head_class=parallel_lm_head_class,
    )
    if not decision.eligible:
        # The user asked for FP8 on this very head and it is unsafe: the engine must not start on
        # a silent fallback. Anything else (flag off, target role, other layers) resolves normally.
        if enabled and role == "draft" and is_lm_head(layer, parallel_lm_head_type, parallel_lm_head_class):
            raise HeadFp8EligibilityError(decision.reason)
        return None, decision
    factory = method_factory if method_factory is not None else _default_method_factory
    return factory(), decision
