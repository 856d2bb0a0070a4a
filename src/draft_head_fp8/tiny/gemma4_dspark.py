"""Tiny real Gemma 4 DSpark checkpoints (family ``gemma4-dspark``):

- the target: ``tiny/gemma4.py``'s text config inside a ``Gemma4ForConditionalGeneration`` with a
  one-block vision tower. vLLM 0.34 cannot start a ``Gemma4ForCausalLM`` target under this draft
  (flag off too: "Duplicate layer name: model.layers.0.self_attn.attn", the draft's layers are
  named ``model.layers.{i}`` from 0, as a text-only target's are); a multimodal target's are
  ``language_model.model.layers.{i}``. The engine runs it text only (``language_model_only``).
  Its head is tied to its embedding (``model.language_model.embed_tokens.weight``);
- the draft, as vLLM 0.34's ``Gemma4DSparkForCausalLM.load_weights`` reads it (names without
  ``model.``, which it prepends): one ``full_attention`` Gemma 4 layer with ``attention_k_eq_v``
  (vLLM's fused context K/V projection asks for it), its own ``embed_tokens`` and ``lm_head``
  (a self-contained checkpoint, as released ones are), ``fc`` over the target's layers 0 and 1,
  ``hidden_norm``, ``norm`` and Qwen3 DSpark's Markov head (``tiny/qwen3_dspark.markov_head``).
  No soft cap (``final_logit_softcapping`` None: the flag refuses a capped draft).

vLLM replaces the draft's own ``lm_head`` (and ``embed_tokens``) by the target's at load: the
class never sets ``has_own_lm_head``. The draft's own head differs from the target's, so an
engine run that drafted with it would not pick the BF16 target head's tokens.

Every token has a twin, as in Qwen3 DSpark's pair: rows ``2j`` and ``2j + 1`` of the target's
head differ by 1 % noise (``qwen3_dflash.twin_rows``) and their Markov rows are equal, so the
plain FP8 argmax after the term often drafts the other twin. Random weights, bf16, no network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from draft_head_fp8.tiny import gemma4
from draft_head_fp8.tiny import qwen3_dflash as dflash
from draft_head_fp8.tiny import qwen3_dspark as dspark
from draft_head_fp8.tiny.common import (
    SMALL_VISION,
    WEIGHTS,
    Randoms,
    TinyPair,
    copy_tokenizer,
    new_pair,
    rewrite_weights,
    save_model,
)

ARCHITECTURE = "Gemma4DSparkModel"
TARGET_ARCHITECTURE = "Gemma4ForConditionalGeneration"
# The target's head, tied to its embedding, as a Gemma 4 target's checkpoint names it.
TARGET_HEAD_TENSOR = "model.language_model.embed_tokens.weight"
VARIANTS: dict[str, str] = {}


def target_config():
    """``tiny/gemma4.py``'s text config with the smallest vision tower Gemma 4 builds."""
    from transformers import Gemma4Config, Gemma4VisionConfig

    vision = Gemma4VisionConfig(
        hidden_size=SMALL_VISION["hidden_size"],
        intermediate_size=SMALL_VISION["intermediate_size"],
        num_hidden_layers=SMALL_VISION["depth"],
        num_attention_heads=SMALL_VISION["num_heads"],
        num_key_value_heads=SMALL_VISION["num_heads"],
        head_dim=SMALL_VISION["hidden_size"] // SMALL_VISION["num_heads"],
    )
    config = Gemma4Config(
        text_config=gemma4.target_config().to_dict(),
        vision_config=vision.to_dict(),
        audio_config=None,
    )
    config.architectures = [TARGET_ARCHITECTURE]
    return config


def draft_text_config():
    """One full-attention Gemma 4 layer at the target's width, K equal to V, no soft cap."""
    from transformers import Gemma4TextConfig

    kwargs = gemma4.text_config_kwargs(gemma4.TARGET_HIDDEN)
    kwargs.update(num_hidden_layers=1, layer_types=["full_attention"])
    return Gemma4TextConfig(**kwargs, attention_k_eq_v=True, final_logit_softcapping=None)


def draft_config() -> dict:
    """The layer's config named as vLLM's Gemma 4 DSpark class, with the keys vLLM reads: the
    Markov rank, the target layers, the mask token, the block."""
    config = draft_text_config().to_dict()
    config.update(
        architectures=[ARCHITECTURE],
        markov_rank=dspark.MARKOV_RANK,
        target_layer_ids=dspark.TARGET_LAYER_IDS,
        mask_token_id=dspark.MASK_TOKEN_ID,
        block_size=dspark.BLOCK_SIZE,
        dtype="bfloat16",
        tie_word_embeddings=False,
    )
    return config


def draft_tensors(seed: int) -> dict:
    """The layer, embedding and norm of a one-layer transformers ``Gemma4ForCausalLM``, a head of
    the draft's own (a copy of its embedding), ``fc``, ``hidden_norm`` and the Markov head."""
    import torch
    from transformers import Gemma4ForCausalLM

    tensors = {
        name.removeprefix("model."): value.detach().to(torch.bfloat16).contiguous()
        for name, value in Gemma4ForCausalLM(draft_text_config()).state_dict().items()
    }
    tensors["lm_head.weight"] = tensors["embed_tokens.weight"].clone()
    rand = Randoms(seed)
    hidden = gemma4.TARGET_HIDDEN
    return tensors | {
        "fc.weight": rand.normal(hidden, len(dspark.TARGET_LAYER_IDS) * hidden),
        "hidden_norm.weight": rand.ones(hidden),
        **dspark.markov_head(rand, gemma4.VOCAB),
    }


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the twin-row Gemma 4 target) and ``out/assistant`` (the DSpark
    draft). Refuses folders with files."""
    from safetensors.torch import save_file
    from transformers import Gemma4ForConditionalGeneration

    with new_pair(Path(out), seed=seed, vocab=gemma4.VOCAB) as (pair, tok_dir):
        save_model(Gemma4ForConditionalGeneration(target_config()), tok_dir, pair.target)
        rewrite_weights(pair.target, dflash.twin_rows(seed, TARGET_HEAD_TENSOR))
        save_file(draft_tensors(seed), pair.assistant / WEIGHTS, metadata={"format": "pt"})
        text = json.dumps(draft_config(), indent=2, sort_keys=True) + "\n"
        (pair.assistant / "config.json").write_text(text)
    copy_tokenizer(pair.target, pair.assistant)
    return pair
