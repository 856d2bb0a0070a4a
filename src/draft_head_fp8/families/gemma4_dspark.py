"""Gemma 4 DSpark drafters: vLLM 0.34's ``Gemma4DSparkForCausalLM`` (``model_executor/models/
gemma4_dspark.py``), a subclass of Qwen3 DSpark's class with Gemma 4 layers (K equal to V) in a
self-contained checkpoint (its own ``embed_tokens`` and ``lm_head``). It inherits the three
methods vLLM's ``DSparkSpeculator`` (Model Runner V2 only) drafts with, unchanged:
``compute_draft_logits`` (the head through the drafter's logits processor), ``markov_bias`` (the
term through the same processor) and ``map_draft_to_target`` (identity: the class keeps no
``d2t``), so the pick after the term is Qwen3 DSpark's (``MARKOV_TERM``,
``vllm_plugin/markov_pick.py``; docs/certificate.md, "A term added after the head").

- vLLM builds it for a draft config naming ``Gemma4DSparkModel`` (model type ``gemma4_text``),
  under ``speculative_config={"method": "dspark"}``, beside a Gemma 4 multimodal target
  (``Gemma4ForConditionalGeneration``, run text only with ``language_model_only``): vLLM 0.34
  cannot start a text-only ``Gemma4ForCausalLM`` target under it, flag off too ("Duplicate layer
  name: model.layers.0.self_attn.attn": the draft's layers are named as that target's are).
- The head: the target's, at the share (``load_dspark_model`` -> ``share_target_lm_head``). The
  class overrides ``load_weights`` without Qwen3's ``process_eagle_weight``, so it never says
  ``has_own_lm_head`` and vLLM replaces the draft's own ``lm_head`` by the target's, whatever the
  checkpoint ships; the private FP8 head is made at that share. The target ties its head to its
  embedding: the bytes are ``model.language_model.embed_tokens.weight``.
- Not refused for ``logit_scale`` (its logits processor has no scale, unlike Qwen3's); a soft
  cap (``final_logit_softcapping``, Gemma 4's processor reads it) is refused as for every family.
- Runs on vLLM 0.34's engine with a tiny Gemma 4 pair (``tiny/gemma4_dspark.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import (
    AT_SHARE,
    DRAFT,
    MARKOV_TERM,
    TARGET,
    Family,
    HeadSource,
)
from draft_head_fp8.families.qwen3_dspark import TERM_TENSOR
from draft_head_fp8.families.target_head import policy_inputs

VLLM_CLASS = "vllm.model_executor.models.gemma4_dspark:Gemma4DSparkForCausalLM"
ARCHITECTURE = "Gemma4DSparkModel"

# The target's head, handed over at the share; a Gemma 4 multimodal target ties it to its
# language model's embedding.
HEAD = HeadSource(
    folder=TARGET,
    tensor="lm_head.weight",
    when=AT_SHARE,
    tied_tensor="model.language_model.embed_tokens.weight",
)


def recognise(config: Any, folder: Path) -> bool:
    """A DSpark draft: its folder holds the Markov term's head (a Gemma 4 target and a Gemma 4
    MTP assistant, whose text config is ``gemma4_text`` too, do not)."""
    from draft_head_fp8.checkpoint import has_tensor

    return has_tensor(folder, TERM_TENSOR)


FAMILY = Family(
    name="gemma4-dspark",
    title="Gemma 4 DSpark",
    drafters={ARCHITECTURE: VLLM_CLASS},
    speculative_method="dspark",
    config_from=DRAFT,
    model_types=(),
    hf_architectures=(ARCHITECTURE,),
    target_model_types=("gemma4",),
    head=HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.gemma4_dspark",
    policy_inputs=policy_inputs,
    cpu_engine_options={"language_model_only": True},
    recognise=recognise,
    term=MARKOV_TERM,
)
