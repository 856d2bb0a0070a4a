"""vLLM's drafter classes with an FP8 head: each family's vLLM class plus one decision at
construction.

Registered for every family's architectures only when the experiment flag is on. The class for
an architecture is made on first use (``drafter_class``, also this module's ``__getattr__``, so
that vLLM's registry can name it ``draft_head_fp8.vllm_plugin.drafter:DraftHeadFp8<vLLM class>``)
and imports only that family's vLLM model file. Everything but the head is vLLM's own code path;
the target model is never touched from here.

What is decided at construction depends on when the head's bytes exist (the family says):
- at load (a head tied to the drafter's own embedding): the policy on the drafter's own head,
  then the FP8 head method installed on it, quantizing when vLLM finishes loading;
- at the share (the target's head, handed over by vLLM's proposer): the settings, the layout
  (no pipeline parallelism) and the family's own refusal; the private FP8 head is made at the
  share (``shared_head``), where the policy judges the target's head.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from vllm.logger import init_logger

from draft_head_fp8 import families, settings
from draft_head_fp8.checkpoint import resolve_model_dir
from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.exact_pick import guarantee
from draft_head_fp8.families.family import AT_SHARE, DRAFT, Family, HeadSource
from draft_head_fp8.policy import (
    env_enabled,
    soft_capped_logits,
    unexpected_drafter_class,
    vllm_head_quantization_conflict,
)
from draft_head_fp8.vllm_plugin import CLASS_PREFIX, post_share, seams, vllm_classes
from draft_head_fp8.vllm_plugin.head_bytes import checkpoint_of
from draft_head_fp8.vllm_plugin.markov_pick import MarkovTermPick
from draft_head_fp8.vllm_plugin.plan import HeadPlan, fp8_head_quant_config
from draft_head_fp8.vllm_plugin.refusal import (
    announce_choices,
    announce_refusal,
    refusing_class,
)
from draft_head_fp8.vllm_plugin.selection import select_draft_head_method

# Under "vllm." so that vLLM's own logging configuration shows it beside its lines.

if TYPE_CHECKING:  # annotations only: vLLM's names are read through seams.py
    from vllm.config import VllmConfig

logger = init_logger(f"vllm.{__name__}")


def no_pipeline_parallel(share: str) -> str:
    # The proposer shares only without pipeline parallelism, and the receipt is captured at that
    # share: without it there would be no proof, so no start.
    return (
        f"pipeline parallelism is not served: the post-share receipt needs the {share} "
        "share, which vLLM skips when pipeline_parallel_size > 1"
    )


def one_head_quantization(speculative_config: Any) -> None:
    """Refuse vLLM's own draft-head quantization (``draft_lm_head_quantization``, vLLM 0.33+,
    Model Runner V2) beside the flag: both replace the drafter's head at the share, vLLM's copy
    without exactness; which one serves must be the user's choice, said, not a race. vLLM 0.32's
    config has no such field (read with a default)."""
    scheme = getattr(speculative_config, "draft_lm_head_quantization", None)
    if scheme is not None:
        raise HeadFp8EligibilityError(vllm_head_quantization_conflict(str(scheme)))


def draft_folder(vllm_config: VllmConfig) -> Any:
    draft_config = vllm_config.speculative_config.draft_model_config
    return resolve_model_dir(draft_config.model, getattr(draft_config, "revision", None))


def head_plan(
    family: Family, vllm_config: VllmConfig, head: HeadSource, target_config: Any = None
) -> HeadPlan:
    """Everything ``head`` needs from the engine's config and environment, read once; a bad
    setting refuses start-up here, before anything is built. ``target_config``: the target's
    model config as it was before vLLM built the drafter (by default the engine's now)."""
    speculative = vllm_config.speculative_config
    draft_config = speculative.draft_model_config
    target_config = vllm_config.model_config if target_config is None else target_config
    source_config = draft_config if head.folder == DRAFT else target_config
    return HeadPlan(
        family=family,
        head=head,
        rescore_k=settings.exact_pick_top_k(),
        cpu_kernel=settings.cpu_kernel(),
        bf16_from=settings.bf16_from(),
        checkpoint_dir=resolve_model_dir(
            source_config.model, getattr(source_config, "revision", None)
        ),
        serving_dtype=draft_config.dtype,
        draft_sample_method=str(getattr(speculative, "draft_sample_method", "greedy")),
        certify=settings.certify(),
        head_kernel=settings.head_kernel(),
        top_k=family.top_k(draft_config.hf_config) if family.top_k else None,
    )


class DraftHeadFp8Drafter:
    """Mixed in before a family's vLLM drafter class (see ``drafter_class``)."""

    family: Family

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        # The target's config, read before vLLM's class is built: some classes replace the
        # engine's model_config by the draft's while they build (Mistral Large 3's EAGLE), and
        # the target's folder is where a shared head's bytes are checked.
        self._target_config = vllm_config.model_config
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.head_decision: Any = None
        self.head_decisions: dict[str, Any] = {}  # by head path, where the drafter has several
        try:
            self._prepare(vllm_config)
        except Exception as exc:
            announce_refusal(exc)
            raise

    def _prepare(self, vllm_config: VllmConfig) -> None:
        family = self.family
        one_head_quantization(vllm_config.speculative_config)
        draft_config = vllm_config.speculative_config.draft_model_config
        moved = built_as_another_class(family, getattr(draft_config, "architectures", None) or ())
        if moved:
            raise HeadFp8EligibilityError(moved)
        if family.refusal is not None:
            reason = family.refusal(self.config)
            if reason:
                raise HeadFp8EligibilityError(reason)
        cap = getattr(getattr(self, "logits_processor", None), "soft_cap", None)
        if cap is not None:  # vLLM's processor caps what the head serves, before the argmax
            raise HeadFp8EligibilityError(soft_capped_logits(float(cap)))
        # The draft's checkpoint says which head it reads (read once, from its headers).
        head = family.head_in(draft_folder(vllm_config))
        if head.when == AT_SHARE:
            self._plan_the_share(vllm_config, head)
        else:
            self._choose_own_head(vllm_config, head)

    def _plan_the_share(self, vllm_config: VllmConfig, head: HeadSource) -> None:
        if seams.read("pp_group")().world_size != 1:
            raise HeadFp8EligibilityError(no_pipeline_parallel("head"))
        plan = head_plan(self.family, vllm_config, head, self._target_config)
        post_share.arm(self, vllm_config, plan)
        logger.info(
            "draft-head-fp8: %s drafter %s: its head is the target's, shared after load; a "
            "private FP8 copy will serve it, proven at the share",
            self.family.title,
            type(self).__name__,
        )

    def _choose_own_head(self, vllm_config: VllmConfig, head: HeadSource) -> None:
        """Every head of the drafter's own (one, or one per draft layer: ``Family.layer_heads``),
        each judged by the policy; FP8 for all of them or for none."""
        chosen = []
        for path, source in self.family.heads_in(self.config, head):
            layer = self.get_submodule(path)
            method, decision = self._select(vllm_config, layer, source)
            chosen.append((path, layer, source, method, decision))
            if method is None:  # one head refused: every head stays as vLLM serves it
                self.head_decision = decision
                return
        self.head_decisions = {path: decision for path, _, _, _, decision in chosen}
        self.head_decision = chosen[0][4]
        plan = head_plan(self.family, vllm_config, head, self._target_config)
        for _, layer, source, method, _ in chosen:
            self._check_seam(layer, source)
            self._install(method, layer, replace(plan, head=source))
        post_share.arm(self, vllm_config, plan)
        announce_choices(chosen[0][3], plan)

    def _select(self, vllm_config: VllmConfig, layer: Any, head: HeadSource) -> Any:
        draft_config = vllm_config.speculative_config.draft_model_config
        return select_draft_head_method(
            layer=layer,
            quant_config=fp8_head_quant_config(),
            role="draft",
            prefix=layer.prefix,
            enabled=env_enabled(),
            head_dtype=layer.weight.dtype,
            model_dtype=draft_config.dtype,
            **self.family.head_policy_inputs(self.config, head),
        )

    def _install(self, method: Any, layer: Any, plan: HeadPlan) -> None:
        checkpoint = checkpoint_of(plan.checkpoint_dir, layer, layer.weight.dtype, plan.head.tensor)
        method.install(
            layer, plan, checkpoint=checkpoint, suppress_tokens=self._suppressed_tokens(layer)
        )
        logger.info(
            "draft-head-fp8: draft %s will be served by %s (kernel %s, %s layout) from %s; %s; "
            "receipt follows the share",
            layer.prefix,
            type(method).__name__,
            type(method.fp8_linear).__name__,
            method.weight_layout,
            plan.head.tensor,
            guarantee(
                method.rescore_k,
                plan.draft_sample_method,
                method.certified,
                getattr(method, "top_k", None),
            ),
        )

    def _suppressed_tokens(self, layer: Any) -> list[int]:
        """The token ids vLLM's drafter masks out of ``layer``'s logits (the family says where
        vLLM keeps them, or which vocabulary suffix it masks): the exact pick never chooses one.
        The head's own vocabulary: a drafter with a head per draft layer has no ``lm_head``."""
        seam = self.family.suppressed_tokens
        listed = list(seams.read_from(self, seam) or ()) if seam else []
        vocab = int(layer.org_vocab_size)
        return [*listed, *self.family.masked_tokens(self.config, vocab)]

    def _check_seam(self, layer: Any, head: HeadSource) -> None:
        """The facts the drafter's own head relies on, before anything is quantized."""
        if not isinstance(layer.quant_method, seams.read("unquantized_embedding_method")):
            raise HeadFp8EligibilityError(
                "draft head already has quant method "
                f"{type(layer.quant_method).__name__}; refusing to replace it"
            )
        tied = layer.weight is self.model.embed_tokens.weight
        # A head tied to the draft embedding: vLLM never loads its lm_head.weight, so the tie is
        # the only way the head gets bytes at all.
        if head.tied_to_draft_embedding and not tied:
            raise HeadFp8EligibilityError(
                "draft head is not tied to the draft embedding after construction; its FP8 "
                "copy would be made from uninitialised memory"
            )
        # EAGLE-3: the head is loaded from its own tensor; an alias of the embedding (which the
        # proposer replaces by the target's) would make the FP8 copy from the wrong bytes.
        if not head.tied_to_draft_embedding and tied:
            raise HeadFp8EligibilityError(
                "draft head shares its weight with the draft embedding after construction; its "
                f"own {head.tensor} would not be what the FP8 copy is made from"
            )
        if seams.read("pp_group")().world_size != 1:
            raise HeadFp8EligibilityError(no_pipeline_parallel("embedding"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Not forward(): torch.compile traces forward. A head that was never proven serves nothing.
        if post_share.pending(self):
            raise HeadFp8EligibilityError(
                "the FP8 draft head is running without a post-share receipt: the share never "
                "happened, so nothing proves the target was left untouched"
            )
        return super().__call__(*args, **kwargs)


@cache
def drafter_class(name: str) -> type:
    """``DraftHeadFp8<vLLM class>``: the class vLLM builds for the family's architecture, with the
    FP8 head, if it is the class the family was written for; else a subclass of it that refuses
    (``policy.unexpected_drafter_class``): a family never swaps vLLM's implementation."""
    found = families.by_drafter_class(name.removeprefix(CLASS_PREFIX))
    if not name.startswith(CLASS_PREFIX) or found is None:
        raise AttributeError(f"{__name__} has no drafter class {name!r}")
    family, architecture = found
    base = vllm_classes.vllm_class(architecture)
    reason = class_refusal(family, architecture, base)
    if reason is not None:
        return refusing_class(name, base, reason, __name__)
    # A family whose drafter adds a term to the head's logits picks after it (markov_pick).
    mixins = (MarkovTermPick,) if family.term is not None else ()
    cls = type(
        name, (*mixins, DraftHeadFp8Drafter, base), {"family": family, "__module__": __name__}
    )
    cls.__qualname__ = name
    return cls


def class_refusal(family: Family, architecture: str, built: type) -> str | None:
    """Why ``family`` refuses the class vLLM builds for ``architecture``; None if it is the class
    the family was written for."""
    written_for, found = family.drafters[architecture], vllm_classes.qualified(built)
    if found == written_for:
        return None
    return unexpected_drafter_class(architecture, found, written_for, family.name)


def built_as_another_class(family: Family, architectures: Any) -> str | None:
    """Why the architecture vLLM is building refuses, where two of a family's architectures name
    one class (DeepSeek-V3's and V3.2's MTP): the class made for that name wraps what vLLM builds
    for the first of them, so the one being built is checked too (vLLM builds another class for
    V3.2 on CUDA); None where vLLM builds the class the family was written for."""
    for architecture in architectures:
        if architecture in family.drafters:
            built = vllm_classes.vllm_class(architecture)
            return class_refusal(family, architecture, built)
    return None


def __getattr__(name: str) -> type:
    return drafter_class(name)
