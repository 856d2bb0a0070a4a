"""Tiny real Qwen3 DFlash checkpoints (family ``qwen3-dflash``): the Qwen3 target of
``tiny/qwen3_eagle3.py`` (three layers, untied head) and a DFlash draft folder as vLLM's
``DFlashQwen3ForCausalLM.load_weights`` reads it (names without ``model.``, which it prepends):

- ``layers.0.*``: layer 0 of a one-layer transformers ``Qwen3ForCausalLM`` (DFlash's decoder
  layer has Qwen3's names and shapes: ``q_norm``/``k_norm``, no widened attention input);
- ``fc.weight`` (``[hidden, 2 x hidden]``: the target's hidden states after layers 0 and 1,
  ``dflash_config.target_layer_ids``), ``hidden_norm``, ``norm``.

No embedding and no head: vLLM shares the target's (``load_dflash_model``), so the draft's head
is the target's, as for Mistral's EAGLE. The config names ``DFlashDraftModel`` and keeps the
mask token and the target layers in ``dflash_config``, as released DFlash drafts do; the mask
token is ``<unk>``. Random weights, bf16, built in seconds without network.

Every token has a twin (``TWINS``): rows ``2j`` and ``2j + 1`` of the target's head differ by
1 % noise, closer than the FP8 step, so the FP8 head's argmax is often the other twin than the
BF16 head's: the engine test can see a draft token that is not exact.

Qwen3 DSpark's tiny draft (``tiny/qwen3_dspark.py``) is this backbone and target plus its
Markov head: ``write_pair`` is shared.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny import qwen3_eagle3
from draft_head_fp8.tiny.common import (
    WEIGHTS,
    Randoms,
    TinyPair,
    copy_tokenizer,
    new_pair,
    rewrite_weights,
    save_model,
)

ARCHITECTURE = "DFlashDraftModel"
TWINS = 1e-2  # how far apart twin rows of the target's head are (relative noise)
BLOCK_SIZE = 3
TARGET_LAYER_IDS = [0, 1]
MASK_TOKEN_ID = 3  # <unk>: the token vLLM feeds the block's query slots after the anchor
VARIANTS: dict[str, str] = {}


def backbone_config() -> dict:
    """One layer of the target's Qwen3 config, with what every DFlash-style draft of Qwen3
    declares: its block size, the target's hidden size, its dtype."""
    config = qwen3_eagle3.config(1).to_dict()
    config.update(block_size=BLOCK_SIZE, target_hidden_size=eagle3.HIDDEN, dtype="bfloat16")
    return config


def draft_config() -> dict:
    """The backbone's config named as vLLM's DFlash class, the mask token and the target
    layers in ``dflash_config``."""
    config = backbone_config()
    config.update(
        architectures=[ARCHITECTURE],
        dflash_config={"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": TARGET_LAYER_IDS},
    )
    return config


def backbone_tensors(seed: int, rand: Randoms | None = None) -> dict:
    """One Qwen3 decoder layer, ``fc`` over the target layers' hidden states, the two norms
    (``fc`` drawn from ``rand``, a draft's stream of draws, where it has more to draw)."""
    import torch
    from transformers import Qwen3ForCausalLM

    rand = Randoms(seed) if rand is None else rand
    prefix = "model.layers.0."
    layer = {
        "layers.0." + k.removeprefix(prefix): v.detach().to(torch.bfloat16).contiguous()
        for k, v in Qwen3ForCausalLM(qwen3_eagle3.config(1)).state_dict().items()
        if k.startswith(prefix)
    }
    hidden = eagle3.HIDDEN
    return layer | {
        "fc.weight": rand.normal(hidden, len(TARGET_LAYER_IDS) * hidden),
        "hidden_norm.weight": rand.ones(hidden),
        "norm.weight": rand.ones(hidden),
    }


def twin_rows(seed: int, tensor: str = "lm_head.weight"):
    """An edit for ``rewrite_weights``: row ``2j + 1`` of the target's head (``tensor``: its
    embedding where the target ties them) becomes row ``2j`` times (1 + ``TWINS`` N(0, 1))."""
    import torch

    def edit(tensors: dict) -> dict:
        head = tensors[tensor].float()
        gen = torch.Generator().manual_seed(seed + 11)
        noise = 1 + TWINS * torch.randn(head[0::2].shape, generator=gen)
        head[1::2] = head[0::2] * noise
        tensors[tensor] = head.to(torch.bfloat16)
        return tensors

    return edit


def write_pair(out: Path, *, seed: int, config: dict, tensors) -> TinyPair:
    """``out/target`` (the twin-row Qwen3 target) and ``out/assistant`` (``config`` and
    ``tensors(seed)``). Refuses folders with files."""
    from safetensors.torch import save_file
    from transformers import Qwen3ForCausalLM

    with new_pair(out, seed=seed, vocab=eagle3.VOCAB) as (pair, tok_dir):
        save_model(Qwen3ForCausalLM(qwen3_eagle3.config(3)), tok_dir, pair.target)
        rewrite_weights(pair.target, twin_rows(seed))
        save_file(tensors(seed), pair.assistant / WEIGHTS, metadata={"format": "pt"})
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        (pair.assistant / "config.json").write_text(text)
    copy_tokenizer(pair.target, pair.assistant)
    return pair


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the DFlash draft). Refuses folders with
    files."""
    return write_pair(Path(out), seed=seed, config=draft_config(), tensors=backbone_tensors)
