"""The Gemma 4 MTP drafter with an FP8 head: vLLM's ``Gemma4MTP`` plus one decision at construction.

Registered for ``Gemma4MTPModel`` only when the experiment flag is on. Everything but the head is
vLLM's own code path; the target model is never touched from here.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from vllm.config import VllmConfig
from vllm.config.quantization import resolve_quantization_config
from vllm.distributed.parallel_state import get_pp_group
from vllm.logger import init_logger
from vllm.model_executor.layers.quantization.online.base import OnlineQuantizationConfig
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.models.gemma4_mtp import Gemma4MTP

from draft_head_fp8 import settings
from draft_head_fp8.checkpoint import resolve_model_dir, tensor_sha256_as
from draft_head_fp8.evidence.exact_pick import guarantee
from draft_head_fp8.policy import HeadFp8EligibilityError, env_enabled
from draft_head_fp8.selection import select_draft_head_method
from draft_head_fp8.vllm_plugin import post_share
from draft_head_fp8.vllm_plugin.refusal import announce_refusal, announce_warning

logger = init_logger(__name__)


def fp8_head_quant_config() -> OnlineQuantizationConfig:
    """The scheme the head gets, described the way vLLM describes its own online schemes:
    ``--quantization fp8_per_tensor``, whose linear spec prints ``fp8_per_tensor_static``."""
    return OnlineQuantizationConfig(resolve_quantization_config("fp8_per_tensor", None))


class DraftHeadFp8Gemma4MTP(Gemma4MTP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.head_decision: Any = None
        try:
            self._choose_head(vllm_config)
        except Exception as exc:
            announce_refusal(exc)
            raise

    def _choose_head(self, vllm_config: VllmConfig) -> None:
        draft_config = vllm_config.speculative_config.draft_model_config
        method, decision = select_draft_head_method(
            layer=self.lm_head,
            quant_config=fp8_head_quant_config(),
            role="draft",
            prefix=self.lm_head.prefix,
            enabled=env_enabled(),
            ordered_embeddings=bool(getattr(self.config, "use_ordered_embeddings", False)),
            tie_word_embeddings=bool(getattr(self.config, "tie_word_embeddings", True)),
            head_dtype=self.lm_head.weight.dtype,
            model_dtype=draft_config.dtype,
        )
        self.head_decision = decision
        if method is None:
            return
        self._check_seam(vllm_config)
        # Settings first: a bad value refuses start-up before anything is built.
        rescore_k, cpu = settings.rescore_top_k(), settings.cpu_kernel()
        indices = self.lm_head.shard_indices
        method.checkpoint_source = partial(
            tensor_sha256_as,
            resolve_model_dir(draft_config.model, getattr(draft_config, "revision", None)),
            self.lm_head.weight.dtype,
            # This rank's real rows only: at TP N each rank holds a vocab shard.
            rows=(indices.org_vocab_start_index, indices.org_vocab_end_index),
        )
        method.install(
            self.lm_head,
            rescore_k=rescore_k,
            cpu_kernel=cpu,
            suppress_tokens=list(getattr(self, "_suppress_token_ids", None) or ()),
        )
        post_share.arm(self, vllm_config)
        sample_method = getattr(vllm_config.speculative_config, "draft_sample_method", "greedy")
        logger.info(
            "draft-head-fp8: draft %s will be served by %s (kernel %s, %s layout); %s; receipt "
            "follows the embedding share",
            self.lm_head.prefix,
            type(method).__name__,
            type(method.fp8_linear).__name__,
            method.weight_layout,
            guarantee(method.rescore_k, sample_method),
        )
        if method.kernel is not None and method.kernel.warning:
            announce_warning(method.kernel.warning)
        if str(sample_method) != "greedy":
            # Exact picks are exact draft tokens only when the draft token is an argmax.
            announce_warning(guarantee(method.rescore_k, sample_method))

    def _check_seam(self, vllm_config: VllmConfig) -> None:
        """The facts the FP8 head relies on, checked before anything is quantized."""
        if not isinstance(self.lm_head.quant_method, UnquantizedEmbeddingMethod):
            raise HeadFp8EligibilityError(
                "draft head already has quant method "
                f"{type(self.lm_head.quant_method).__name__}; refusing to replace it"
            )
        # vLLM never loads lm_head.weight for this drafter: the tie to the draft embedding is
        # the only way the head gets bytes at all.
        if self.lm_head.weight is not self.model.embed_tokens.weight:
            raise HeadFp8EligibilityError(
                "draft head is not tied to the draft embedding after construction; its FP8 "
                "copy would be made from uninitialised memory"
            )
        if get_pp_group().world_size != 1:
            # The proposer shares embeddings only without pipeline parallelism, and the receipt is
            # captured at that share: without it there would be no proof, so no start.
            raise HeadFp8EligibilityError(
                "pipeline parallelism is outside this prototype: the post-share receipt needs "
                "the embedding share, which vLLM skips when pipeline_parallel_size > 1"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Not forward(): torch.compile traces forward. A head that was never proven serves nothing.
        if post_share.pending(self):
            raise HeadFp8EligibilityError(
                "the FP8 draft head is running without a post-share receipt: the embedding share "
                "never happened, so nothing proves the target was left untouched"
            )
        return super().__call__(*args, **kwargs)
