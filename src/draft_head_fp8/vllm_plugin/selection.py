"""The policy's decision turned into a head method: the one place where the pure policy meets
the vLLM plugin. ``select_draft_head_method`` is a public name (docs/contract.md, "Policy"), public
as ``draft_head_fp8.selection``'s. It lives in the plugin because its default method is the
plugin's (imported only when a head is really selected); nothing here imports torch or vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.policy import Eligibility, eligibility, is_lm_head


def _package_head_method() -> Any:
    # Imported only when a head is really selected: it needs torch and vLLM.
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
    shared_target_head: bool = False,
    head_quant_method: str | None = None,
    draft_vocab_size: int | None = None,
    vocab_size: int | None = None,
    own_head: bool = False,
    layer_heads: bool = False,
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
        shared_target_head=shared_target_head,
        head_quant_method=head_quant_method,
        draft_vocab_size=draft_vocab_size,
        vocab_size=vocab_size,
        own_head=own_head,
        layer_heads=layer_heads,
    )
    if not decision.eligible:
        # The user asked for FP8 on this very head and it is unsafe: the engine must not start on
        # a silent fallback. Anything else (flag off, target role, other layers) resolves normally.
        if (
            enabled
            and role == "draft"
            and is_lm_head(layer, parallel_lm_head_type, parallel_lm_head_class)
        ):
            raise HeadFp8EligibilityError(decision.reason)
        return None, decision
    factory = method_factory if method_factory is not None else _package_head_method
    return factory(), decision
