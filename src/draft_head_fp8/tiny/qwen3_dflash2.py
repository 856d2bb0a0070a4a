"""Tiny real Qwen3 DFlash2 checkpoints (family ``qwen3-dflash2``): Qwen3 DFlash's tiny pair
(``tiny/qwen3_dflash.py``: its twin-row Qwen3 target, and its one-layer backbone, ``fc`` and
norms) plus what vLLM 0.34's ``DFlash2Qwen3ForCausalLM`` loads besides:

- ``layers.0.attention_conv`` and ``layers.0.mlp_conv``: each a ``base_kernel``
  (``[2, taps, hidden]``: tap 0 one, the later taps small) and a ``kernel_projection``
  (``[2 x taps x groups, hidden]``, small), so the convolutions stay near the identity;
- ``candidate_selector``: ``predecessor_codebook`` and ``successor_codebook`` (``[vocab,
  rank]``) and ``hidden_projection`` (``[rank, hidden]``), scaled so that an edge is of the size
  of the head's logits.

The config names ``DFlash2DraftModel`` and keeps the selector (``selector_top_k``,
``selector_rank``) and the convolutions in ``dflash_config`` beside DFlash's mask token and
target layers. Random weights, bf16, built in seconds without network.

Every token has a twin (``tiny/qwen3_dflash.py``, ``TWINS``): rows ``2j`` and ``2j + 1`` of the
target's head differ by 1 %, closer than the FP8 step, and their successor rows are equal, so the
selector never tells them apart: the plain FP8 head's top-K often holds or orders the twins
otherwise than the BF16 head's, and, where the BF16 logits of twins round to one value, the K-th
and (K+1)-th best tie.
"""

from __future__ import annotations

import os
from pathlib import Path

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny import qwen3_dflash as dflash
from draft_head_fp8.tiny.common import Randoms, TinyPair

ARCHITECTURE = "DFlash2DraftModel"
SELECTOR_TOP_K = 4
SELECTOR_RANK = 16
CONV_TAPS = 2
CONV_GROUP = 32  # channels per group: hidden 128 makes four groups
VARIANTS: dict[str, str] = {}


def draft_config() -> dict:
    """DFlash's one-layer backbone config named as vLLM's DFlash2 class, its ``dflash_config``
    with the selector and the convolutions."""
    config = dflash.backbone_config()
    config.update(
        architectures=[ARCHITECTURE],
        dflash_config={
            "mask_token_id": dflash.MASK_TOKEN_ID,
            "target_layer_ids": dflash.TARGET_LAYER_IDS,
            "selector_top_k": SELECTOR_TOP_K,
            "selector_rank": SELECTOR_RANK,
            "conv_kernel_size": CONV_TAPS,
            "conv_group_size": CONV_GROUP,
        },
    )
    return config


def _conv(rand: Randoms, name: str) -> dict:
    import torch

    hidden = eagle3.HIDDEN
    base = rand.normal(2, CONV_TAPS, hidden, std=0.1)
    base[:, 0] = torch.ones(hidden, dtype=torch.bfloat16)  # tap 0: the row itself
    groups = hidden // CONV_GROUP
    return {
        f"layers.0.{name}.base_kernel": base,
        f"layers.0.{name}.kernel_projection.weight": rand.normal(2 * CONV_TAPS * groups, hidden),
    }


def draft_tensors(seed: int) -> dict:
    """DFlash's backbone tensors, the two convolutions and the candidate selector."""
    rand = Randoms(seed)
    vocab = eagle3.VOCAB
    # One stream of draws: the backbone's first, then the convolutions', then the selector's.
    tensors = dflash.backbone_tensors(seed, rand)
    tensors |= _conv(rand, "attention_conv") | _conv(rand, "mlp_conv")
    return tensors | {
        "candidate_selector.predecessor_codebook": rand.normal(vocab, SELECTOR_RANK, std=1.0),
        # Twins share a successor row: the edge never tells them apart, their logits do.
        "candidate_selector.successor_codebook": rand.normal(vocab // 2, SELECTOR_RANK, std=0.1)
        .repeat_interleave(2, 0)
        .contiguous(),
        "candidate_selector.hidden_projection.weight": rand.normal(SELECTOR_RANK, eagle3.HIDDEN),
    }


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (DFlash's twin-row target) and ``out/assistant`` (the DFlash2
    draft). Refuses folders with files."""
    return dflash.write_pair(Path(out), seed=seed, config=draft_config(), tensors=draft_tensors)
