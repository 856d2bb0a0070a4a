"""Policy: may this layer's LM head be served in FP8? Pure decisions: no torch, and no vLLM
import, not even a lazy one (vLLM's class is looked up among the modules already loaded).

The rules and their reason strings are the contract (docs/contract.md, "Policy"): people moved
here from the experiment overlay keep matching on them. The first failing rule wins. Turning a
decision into a vLLM head method is ``draft_head_fp8.selection``'s job.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
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


_VLLM_HEAD_MODULE = "vllm.model_executor.layers.vocab_parallel_embedding"


class _NotLoaded:
    """Stands for vLLM's ParallelLMHead while vLLM is installed but not imported: no object can
    be an instance of a class that does not exist yet, so nothing is an instance of this."""


@cache
def _vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None  # finds, never imports
    except (ImportError, ValueError):
        return False


def _vllm_parallel_lm_head() -> type | None:
    """vLLM's ``ParallelLMHead`` if vLLM has loaded it; ``_NotLoaded`` if vLLM is installed but
    not loaded; None without vLLM (then the class is recognised by name)."""
    module = sys.modules.get(_VLLM_HEAD_MODULE)
    head = getattr(module, "ParallelLMHead", None)
    if isinstance(head, type):
        return head
    return _NotLoaded if _vllm_installed() else None


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
