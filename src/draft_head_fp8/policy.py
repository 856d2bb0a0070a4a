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

from draft_head_fp8.errors import HeadFp8EligibilityError  # noqa: F401 - public here too
from draft_head_fp8.settings import EXPERIMENT_ENV, SLOW_CPU_OVERRIDE

EXPECTED_ONLINE_SPEC = "fp8_per_tensor_static"
EXPECTED_METHOD = "Fp8PerTensorOnlineLinearMethod"

_TRUE_VALUES = frozenset({"1", "true", "yes"})


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
    shared_target_head: bool = False,
    head_quant_method: str | None = None,
    draft_vocab_size: int | None = None,
    vocab_size: int | None = None,
    own_head: bool = False,
    layer_heads: bool = False,
) -> Eligibility:
    """The first failing rule's reason, or ``eligible`` (docs/contract.md, "Policy").

    The keywords after ``parallel_lm_head_class`` come from the drafter's family:
    ``shared_target_head`` when the head is the target's, handed to the drafter at vLLM's share
    (its bytes are the target's, so the tie rule does not apply; they must be BF16 and on no
    quant method yet: ``head_quant_method``); ``draft_vocab_size`` / ``vocab_size`` when the
    drafter has a vocabulary of its own (EAGLE-3); ``own_head`` when the head is the drafter's
    own untied ``lm_head``, loaded from its own checkpoint (EAGLE-3): its vocabulary is its own and
    its FP8 copy a new Parameter, so neither the own-vocabulary rule nor the tie rule applies;
    ``layer_heads`` when it is one of the heads a drafter keeps per draft layer (Step3p5MTP).
    """
    spec = online_quant_spec(quant_config)
    classes = (parallel_lm_head_type, parallel_lm_head_class)
    # The contract's order: is this the draft's LM head on the scheme asked for; can it be FP8.
    reason = (
        _layer_rule(enabled, role, layer, prefix, spec, *classes, layer_heads)
        or _head_rule(
            ordered_embeddings=ordered_embeddings,
            tie_word_embeddings=tie_word_embeddings,
            head_dtype=head_dtype,
            model_dtype=model_dtype,
            shared_target_head=shared_target_head,
            head_quant_method=head_quant_method,
            draft_vocab_size=draft_vocab_size,
            vocab_size=vocab_size,
            own_head=own_head,
            layer_heads=layer_heads,
        )
        or "eligible"
    )
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


def _layer_rule(
    enabled: bool,
    role: str,
    layer: Any,
    prefix: str,
    spec: str | None,
    parallel_lm_head_type: type | None,
    parallel_lm_head_class: type | None,
    layer_heads: bool = False,
) -> str | None:
    """The first rule about the layer that fails (None: it is the draft's LM head, asked for)."""
    if not enabled:
        return "experiment flag is disabled"
    if role != "draft":
        return "role is not draft"
    if not is_lm_head(layer, parallel_lm_head_type, parallel_lm_head_class):
        return "layer is not ParallelLMHead"
    # A draft layer's own head is named ``head`` (``shared_head.head``), the drafter's ``lm_head``.
    if _last_component(prefix) != ("head" if layer_heads else "lm_head"):
        return "prefix is not an LM head"
    if spec != EXPECTED_ONLINE_SPEC:
        return f"online spec {spec!r} is not {EXPECTED_ONLINE_SPEC!r}"
    return None


def _head_rule(
    *,
    ordered_embeddings: bool,
    tie_word_embeddings: bool,
    head_dtype: Any,
    model_dtype: Any,
    shared_target_head: bool,
    head_quant_method: str | None,
    draft_vocab_size: int | None,
    vocab_size: int | None,
    own_head: bool = False,
    layer_heads: bool = False,
) -> str | None:
    """The first rule about the head's bytes that fails (None: an FP8 copy can serve it)."""
    if ordered_embeddings:
        # Centroid heads gather rows of lm_head.weight directly; an FP8 weight cannot serve that.
        return "ordered embeddings bypass LogitsProcessor.quant_method.apply"
    if layer_heads:
        # A draft layer's own head (Step3p5MTP): loaded from its own tensor and kept by vLLM
        # whatever it holds (its proposer compares only a top-level lm_head with the target's),
        # so neither the tie rule nor the whole-vocabulary rule applies.
        return _dtype_rule(head_dtype, model_dtype)
    if own_head:
        return _own_head_rule(draft_vocab_size, vocab_size, head_dtype, model_dtype)
    if draft_vocab_size is not None and vocab_size is not None and draft_vocab_size != vocab_size:
        # The head would be a second head over the draft's own vocabulary, not the target's.
        return (
            f"draft head over its own vocabulary ({draft_vocab_size} of the target's {vocab_size} "
            "tokens, EAGLE-3 style) is not served for this drafter: its family proves a head over "
            "the target's vocabulary"
        )
    if not tie_word_embeddings and not shared_target_head:
        return (
            "untied draft embedding/head is not served: the FP8 copy is proven only for a head "
            "tied to its embedding or read from the target"
        )
    if head_dtype is not None and model_dtype is not None and str(head_dtype) != str(model_dtype):
        return "custom FP8 head requires head dtype aligned with hidden dtype"
    if shared_target_head and head_dtype is not None and "bfloat16" not in str(head_dtype):
        return (
            f"target LM head is {str(head_dtype).removeprefix('torch.')}, not BF16: its FP8 "
            "draft copy and the exact pick are made from BF16 rows (serve with --dtype bfloat16)"
        )
    if shared_target_head and head_quant_method not in (None, "UnquantizedEmbeddingMethod"):
        return (
            f"target LM head is already quantized ({head_quant_method}): an exact FP8 draft head "
            "is made from its BF16 rows"
        )
    return None


def own_head_over_whole_vocabulary(rows: int) -> str:
    return (
        f"draft head of its own over the target's whole vocabulary ({rows} rows): vLLM compares "
        "it byte for byte with the target's head after loading and shares the target's when "
        "equal, which an FP8 copy made at load cannot take part in; serve this draft with the "
        f"flag unset"
    )


def _own_head_rule(
    draft_vocab_size: int | None, vocab_size: int | None, head_dtype: Any, model_dtype: Any
) -> str | None:
    """A drafter's own untied head over its own vocabulary (EAGLE-3)."""
    if draft_vocab_size is None or vocab_size is None:
        return "draft head of its own without a known draft and target vocabulary size"
    if draft_vocab_size == vocab_size:
        return own_head_over_whole_vocabulary(draft_vocab_size)
    return _dtype_rule(head_dtype, model_dtype)


def _dtype_rule(head_dtype: Any, model_dtype: Any) -> str | None:
    if head_dtype is not None and model_dtype is not None and str(head_dtype) != str(model_dtype):
        return "custom FP8 head requires head dtype aligned with hidden dtype"
    return None


# The FP8 head on a CPU without vLLM's W8A16 op: torch._scaled_mm, the one layout-keeping FP8
# kernel there. Measured in the real engine at 1024 x 262144 (docs/benchmarks.md), per draft
# logits call: 4234 vs 53.9 ms BF16 on a 2-core AVX2-only EPYC, 2443 vs 28 ms on a 2-core
# AVX512-BF16 EPYC forced onto it.
SLOW_CPU_PATH = (
    "the FP8 draft head runs through torch._scaled_mm, which has no fast CPU path: measured 87x "
    "slower than the BF16 head (2443 vs 28 ms per call at 1024 x 262144, AVX512-BF16 EPYC) and "
    "79x on an AVX2-only EPYC (4234 vs 53.9 ms); unset "
    f"{EXPERIMENT_ENV} to serve the BF16 head"
)


NO_FAST_CPU_HEAD = "no FP8 draft head faster than the BF16 head on this CPU"


def slow_cpu_refusal(missing: str) -> str:
    """Why the flag refuses a CPU with no FP8 head faster than BF16, and what serves it anyway:
    the flag is for speed, so a head 80x slower than the one it replaces is not served unasked."""
    return (
        f"{NO_FAST_CPU_HEAD}: {missing}; the FP8 path left, "
        "torch._scaled_mm, measured 79x slower than the BF16 head (4234 vs 53.9 ms per draft "
        f"logits call at 1024 x 262144, 2-core AVX2-only EPYC); unset {EXPERIMENT_ENV} to serve "
        f"the BF16 head, or set {SLOW_CPU_OVERRIDE} to serve the slow FP8 head anyway"
    )


UNSERVED_DRAFTER = "is not a drafter this package serves"


def unserved_drafter(architecture: str, served: list[str], why: str | None = None) -> str:
    """Why the flag refuses a drafter no family serves (EAGLE-3, DFlash, other MTP models): with
    the flag on, the user asked for a proven FP8 head, and this drafter would silently serve its
    BF16 head with no receipt. ``why``: the architecture's verdict (``verdicts``), what its class
    does that the plugin does not prove and what would change that."""
    because = f": {why}" if why else ""
    return (
        f"{architecture} {UNSERVED_DRAFTER} (its head would serve in BF16, with no receipt)"
        f"{because}; served: {', '.join(sorted(served))}; unset {EXPERIMENT_ENV} to serve it as "
        "vLLM does"
    )


UNEXPECTED_DRAFTER_CLASS = "which this package's family was not written for"


def unexpected_drafter_class(architecture: str, built: str, written_for: str, family: str) -> str:
    """Why the flag refuses a drafter whose class in the installed vLLM is not the one its family
    was written for (vLLM 0.34 builds Qwen3.5's MTP from a new NVIDIA class on CUDA): the family
    knows where the old class keeps its head references, not the new one's, and wrapping the old
    class instead would silently swap vLLM's implementation."""
    return (
        f"vLLM builds {architecture} as {built}, {UNEXPECTED_DRAFTER_CLASS} (the {family} family "
        f"wraps {written_for}; serving the other class instead would swap vLLM's implementation, "
        f"and where this one keeps its head references is unread); unset {EXPERIMENT_ENV} to "
        "serve it as vLLM does"
    )


VLLM_HEAD_QUANTIZATION_CONFLICT = "vLLM's own draft-head quantization is also set"


def vllm_head_quantization_conflict(scheme: str) -> str:
    """Why the flag refuses an engine where vLLM's own draft-head quantization
    (``draft_lm_head_quantization``, vLLM 0.33+) is set too: both would replace the drafter's
    head at the share, and only one of them is exact."""
    return (
        f"{VLLM_HEAD_QUANTIZATION_CONFLICT} (speculative_config draft_lm_head_quantization="
        f"{scheme!r}: vLLM serves the drafter a {scheme} copy of the target's head, with no "
        f"exactness: its draft tokens may differ from the BF16 head's); {EXPERIMENT_ENV} serves "
        "an FP8 head whose draft tokens are exactly the BF16 head's, proven by a receipt; set one "
        f"of them: remove draft_lm_head_quantization, or unset {EXPERIMENT_ENV}"
    )


SOFT_CAPPED_LOGITS = "the draft's logits are soft-capped after the head"


def soft_capped_logits(cap: float) -> str:
    """Why the flag refuses a drafter whose logits processor soft-caps the head's logits
    (``final_logit_softcapping``: ``tanh(logits / cap) * cap``, rounded to the logits' dtype):
    the certified pick is proven for the head's logits, and the cap can round two of them to
    one value (at cap 30, BF16 48.0 and 47.75 both become 27.625), where vLLM's argmax takes the
    lower index: a token the certificate proved below the pick can be the draft."""
    return (
        f"{SOFT_CAPPED_LOGITS} (soft cap {cap:g}: tanh(logits / {cap:g}) * {cap:g}, in the "
        "logits' dtype): the exact pick is proven for the head's logits, and the cap can round "
        "the pick and a token below it to one value, which vLLM's argmax gives to the lower "
        f"index; serve this drafter with {EXPERIMENT_ENV} unset, or a checkpoint without "
        "final_logit_softcapping"
    )


DRAFT_UPDATE_REFUSED = "vLLM's draft weight update is refused for this drafter"


def draft_update_refused(family_title: str, why: str) -> str:
    """Why the flag refuses a weight-transfer session of the draft model of a family whose draft
    vLLM itself cannot update in place (``Family.draft_updates_refused``): refused before a byte
    moves, the engine serving on, unchanged."""
    return (
        f"{DRAFT_UPDATE_REFUSED} ({family_title}): {why}; nothing was changed, the engine serves "
        "on as proven; update the target, or restart the engine with the new draft"
    )


def bf16_from_measured(measured: list[tuple[int, float, float]]) -> int | None:
    """From how many rows per call the BF16 head should serve instead of the FP8 head + pick,
    given ``(rows, fp8_seconds, bf16_seconds)`` measured on this head: the smallest measured
    size from which BF16 is faster at every measured size up; None when FP8 wins at the largest.
    Both paths give the BF16 head's draft token (the pick is exact, BF16 is BF16), so this only
    chooses the faster one; sizes between two measured ones take the larger one's path."""
    threshold = None
    for rows, fp8, bf16 in sorted(measured, reverse=True):
        if bf16 >= fp8:
            break
        threshold = rows
    return threshold
