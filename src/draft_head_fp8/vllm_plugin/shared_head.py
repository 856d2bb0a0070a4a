"""The private FP8 head of a drafter that reads the target's head (MTP and EAGLE-1 drafters),
made at vLLM's share.

vLLM's proposer assigns the target's ``ParallelLMHead`` to the drafter after loading
(``_maybe_share_lm_head``: ``lm_head``, and each MTP layer's ``shared_head.head`` for DeepSeek
and GLM). Each of those assignments is handed this private head instead: a ``ParallelLMHead``
with the target head's vocabulary, padding and TP shard, whose FP8 weight is made from the
target head's BF16 bytes of this rank (hashed against the checkpoint tensor they were loaded
from). The target head is not touched: it keeps serving the target, BF16, on its own method;
its weight is the exact pick's rows (read, never written) and its own GEMM the BF16 path
(``batch_paths``), so the only memory added is the FP8 copy.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.logger import init_logger

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.diagnostics import describe_paths
from draft_head_fp8.evidence.exact_pick import ROWS_FROM_DRAFT, ROWS_FROM_TARGET_HEAD, guarantee
from draft_head_fp8.families.family import AT_SHARE, HeadSource
from draft_head_fp8.policy import env_enabled
from draft_head_fp8.vllm_plugin import seams
from draft_head_fp8.vllm_plugin.head_bytes import checkpoint_of
from draft_head_fp8.vllm_plugin.plan import HeadPlan, fp8_head_quant_config
from draft_head_fp8.vllm_plugin.refusal import announce_choices
from draft_head_fp8.vllm_plugin.selection import select_draft_head_method

# vLLM's names, where the seams table says this release keeps them.
ParallelLMHead = seams.read("parallel_lm_head")
set_current_vllm_config = seams.read("set_current_vllm_config")

# Under "vllm." so that vLLM's own logging configuration shows it beside its lines.
logger = init_logger(f"vllm.{__name__}")


def rows_source(head: HeadSource) -> str:
    """What the exact pick's rows are: the drafter's own, or the target head's weight."""
    return ROWS_FROM_TARGET_HEAD if head.when == AT_SHARE else ROWS_FROM_DRAFT


def target_head_of(private: Any) -> Any:
    return private.quant_method.target_head


def _vocabularies(plan: HeadPlan, drafter: torch.nn.Module) -> dict:
    # The drafter's own vocabulary (EAGLE-3 style), if its config names one: then the head it
    # reads is not the target's, and the policy refuses it.
    inputs = plan.family.policy_inputs(drafter.config)
    return {key: inputs[key] for key in ("draft_vocab_size", "vocab_size")}


def make_private_head(
    plan: HeadPlan, vllm_config: Any, drafter: torch.nn.Module, target: Any, shared: Any
) -> ParallelLMHead:
    """The private FP8 head for ``shared`` (the target's head), proven against the checkpoint;
    raises ``HeadFp8EligibilityError`` with the reason when the policy refuses that head."""
    tied = getattr(shared, "weight", None) is getattr(
        getattr(getattr(target, "model", None), "embed_tokens", None), "weight", None
    )
    with set_current_vllm_config(vllm_config):
        method, decision = select_draft_head_method(
            layer=shared,
            quant_config=fp8_head_quant_config(),
            role="draft",
            prefix=draft_prefix(shared),
            enabled=env_enabled(),
            ordered_embeddings=False,
            tie_word_embeddings=tied,
            head_dtype=shared.weight.dtype,
            model_dtype=plan.serving_dtype,
            shared_target_head=True,
            head_quant_method=type(getattr(shared, "quant_method", None)).__name__,
            **_vocabularies(plan, drafter),
        )
        drafter.head_decision = decision
        if getattr(shared, "bias", None) is not None:
            raise HeadFp8EligibilityError(
                "the target LM head has a bias, which the FP8 draft head does not carry"
            )
        head = _like(shared)
        checkpoint = checkpoint_of(
            plan.checkpoint_dir, head, shared.weight.dtype, plan.head.tensor_for(tied)
        )
        method.install(
            head, plan, checkpoint=checkpoint, checkpoint_owner="target",
            serving_dtype=plan.serving_dtype,
        )  # fmt: skip
        method.make_from(head, shared)
    logger.info(
        "draft-head-fp8: the %s's share of the target head %s is served by a private %s "
        "(kernel %s, %s layout); %s; %s",
        plan.family.title,
        shared.prefix,
        type(method).__name__,
        type(method.fp8_linear).__name__,
        method.weight_layout,
        guarantee(
            method.rescore_k,
            plan.draft_sample_method,
            method.certified,
            getattr(method, "top_k", None),
        ),
        describe_paths(method.diagnostics.get("batch_paths") or {}),
    )
    announce_choices(method, plan)
    return head


def draft_prefix(shared: Any) -> str:
    """The private head's name: the target head's own prefix where it names an LM head, else
    ``lm_head``, the drafter's attribute vLLM's share assigns (some targets build their head with
    no prefix at all, e.g. vLLM 0.34's EXAONE MoE). The private head is the draft's head: it is
    named where the draft holds it."""
    prefix = str(getattr(shared, "prefix", "") or "")
    return prefix if prefix.rsplit(".", 1)[-1] == "lm_head" else "lm_head"


def _like(shared: Any) -> ParallelLMHead:
    """A ``ParallelLMHead`` laid out exactly as ``shared`` (vocabulary, padding, this rank's
    shard), built by vLLM's own constructor with its weight on the meta device: nothing is
    allocated until the FP8 weight replaces it."""
    with torch.device("meta"):
        head = ParallelLMHead(
            shared.num_embeddings,
            shared.embedding_dim,
            bias=False,
            params_dtype=shared.weight.dtype,
            org_num_embeddings=shared.org_vocab_size,
            padding_size=shared.padding_size,
            prefix=draft_prefix(shared),
            disable_tp=getattr(shared, "disable_tp", False),
        )
    if head.shard_indices != shared.shard_indices or head.tp_rank != shared.tp_rank:
        raise HeadFp8EligibilityError(
            "the private FP8 head would not hold the target head's rows of this rank "
            f"({head.shard_indices} != {shared.shard_indices})"
        )
    return head
