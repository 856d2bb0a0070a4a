"""Nemotron Parse 3.5's auxiliary MTP step: vLLM's ``ParseAuxMTPModel``
(``model_executor/models/nemotron_parse3_5_mtp.py``), one trained step (``extra_proj.0`` and
``extra_heads.0`` beside the decoder in the target's checkpoint) that reads the target's head:
the class says ``has_own_lm_head = False``, so vLLM's proposer hands it the target's ``lm_head``
at the share, as it does an EAGLE-1 draft's.

- vLLM rewrites a ``RadioMBartPrefixForCausalLM`` config whose decoder says
  ``causal_vision_prefix`` to it (``SpeculativeConfig.hf_config_override``), run with
  ``speculative_config={"method": "mtp", "model": <target>, "num_speculative_tokens": 1}``
  (vLLM refuses more: the checkpoint has one trained step).
- The head's bytes: the target's ``lm_head.weight`` (its decoder's ``embed_tokens`` where the
  checkpoint ties them: vLLM ties on the top config's or the decoder's ``tie_word_embeddings``),
  handed over at the share; the private FP8 head is made there.
- The target is an encoder-decoder model to vLLM (a ``vision-encoder-decoder`` config): the
  engine tests run text only, with one image allowed (vLLM's encoder-decoder scheduler needs the
  multimodal budget) and no multimodal profiling, so neither Parse's image processor, which
  only the checkpoint ships, nor its RADIO tower ever runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from draft_head_fp8.families.family import AT_SHARE, TARGET, HeadSource, top_value
from draft_head_fp8.families.target_head import mtp_family, policy_inputs

ARCHITECTURE = "RadioMBartPrefixForCausalLM"


def _decoder(config: Any) -> Any:
    return top_value(config, "decoder", {})


def without_the_mtp_step(config: Any) -> str | None:
    """vLLM drafts with Parse's MTP step only where the decoder has a causal visual prefix (its
    config rewrite's condition); a checkpoint without one has no step to draft with."""
    if top_value(_decoder(config), "causal_vision_prefix"):
        return None
    return (
        "the checkpoint has no MTP step: vLLM drafts with ParseAuxMTPModel only for a decoder "
        "with causal_vision_prefix"
    )


def parse_policy_inputs(config: Any) -> dict[str, Any]:
    """The shared head's inputs, read where Parse keeps them: its decoder's vocabulary, and a
    tie said at the top or by the decoder (vLLM ties on either)."""
    decoder = _decoder(config)
    tied = top_value(config, "tie_word_embeddings") or top_value(decoder, "tie_word_embeddings")
    return {
        **policy_inputs(config),
        "tie_word_embeddings": bool(tied),
        "vocab_size": top_value(decoder, "vocab_size"),
    }


FAMILY = replace(
    mtp_family(
        name="parse-aux-mtp",
        title="Nemotron Parse 3.5 auxiliary MTP",
        drafters={
            "ParseAuxMTPModel": "vllm.model_executor.models.nemotron_parse3_5_mtp:ParseAuxMTPModel"
        },
        # No model type: "vision-encoder-decoder" names many models, "mtp" (vLLM's rewrite)
        # every MTP drafter; the architectures are Parse's own.
        model_types=(),
        hf_architectures=(ARCHITECTURE, "ParseAuxMTPModel"),
        tiny="draft_head_fp8.tiny.parse_aux_mtp",
        refusal=without_the_mtp_step,
        draft_prefixes=lambda config: ("decoder.extra_proj.0.", "decoder.extra_heads.0."),
        cpu_engine_options={"limit_mm_per_prompt": {"image": 1}, "skip_mm_profiling": True},
        head=HeadSource(
            folder=TARGET,
            tensor="lm_head.weight",
            when=AT_SHARE,
            tied_tensor="decoder.embed_tokens.weight",
        ),
    ),
    policy_inputs=parse_policy_inputs,
    speculative_tokens=1,
)
