"""Tiny real Qwen3 DSpark checkpoints (family ``qwen3-dspark``): Qwen3 DFlash's tiny pair
(``tiny/qwen3_dflash.py``: its twin-row Qwen3 target, and its one-layer backbone, ``fc`` and
norms, as vLLM 0.34's ``Qwen3DSparkForCausalLM.load_weights`` reads them too) plus the Markov
head:

- ``markov_head.markov_w1`` (``[vocab, rank]``, the previous token's embedding) and
  ``markov_head.markov_w2`` (``[vocab, rank]``, the term's head), scaled so that the term is
  of the head's logits' size: the pick after it differs from the head's alone in many rows.

The config names ``Qwen3DSparkModel`` and keeps the target layers and the mask token at its top
level. No embedding and no head: vLLM shares the target's (``load_dspark_model``), so the
draft's head is the target's, as for Mistral's EAGLE. ``block_size`` draft tokens per step, the
mask token ``<unk>``. Random weights, bf16, built in seconds without network.

Every token has a twin (``TWINS``): rows ``2j`` and ``2j + 1`` of the target's head differ by
1 % noise, closer than the FP8 step, and their Markov rows are equal, so the term never tells
them apart: whichever of each pair the BF16 head prefers, the FP8 head's argmax after the term
often does not, and the engine test can see a pick after the term that is not exact.
"""

from __future__ import annotations

import os
from pathlib import Path

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny import qwen3_dflash as dflash
from draft_head_fp8.tiny.common import Randoms, TinyPair

ARCHITECTURE = "Qwen3DSparkModel"
TWINS = dflash.TWINS
MARKOV_RANK = 16
BLOCK_SIZE = dflash.BLOCK_SIZE
TARGET_LAYER_IDS = dflash.TARGET_LAYER_IDS
MASK_TOKEN_ID = dflash.MASK_TOKEN_ID
VARIANTS: dict[str, str] = {}


def draft_config() -> dict:
    """DFlash's one-layer backbone config (``tiny/qwen3_dflash.py``), named as vLLM's DSpark
    class for Qwen3, with the keys vLLM reads: the Markov rank, the target layers, the mask
    token."""
    config = dflash.backbone_config()
    config.update(
        architectures=[ARCHITECTURE],
        markov_rank=MARKOV_RANK,
        target_layer_ids=TARGET_LAYER_IDS,
        mask_token_id=MASK_TOKEN_ID,
    )
    return config


def draft_tensors(seed: int) -> dict:
    """DFlash's backbone tensors and the Markov head."""
    rand = Randoms(seed)
    vocab = eagle3.VOCAB
    # One stream of draws: the backbone's first, then the Markov head's.
    return dflash.backbone_tensors(seed, rand) | markov_head(rand, vocab)


def markov_head(rand: Randoms, vocab: int) -> dict:
    """The Markov head's two tensors, drawn from ``rand``; twin tokens (``2j``, ``2j + 1``) get
    equal ``markov_w2`` rows, so the term never tells them apart."""
    return {
        # term_j = w2_j . w1[prev]: about 0.1 across tokens, half the target head's logits.
        "markov_head.markov_w1.weight": rand.normal(vocab, MARKOV_RANK, std=1.0),
        "markov_head.markov_w2.weight": rand.normal(vocab // 2, MARKOV_RANK, std=0.025)
        .repeat_interleave(2, 0)
        .contiguous(),
    }


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (DFlash's twin-row target) and ``out/assistant`` (the DSpark
    draft). Refuses folders with files."""
    return dflash.write_pair(Path(out), seed=seed, config=draft_config(), tensors=draft_tensors)
