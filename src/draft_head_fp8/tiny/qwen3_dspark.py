"""Tiny real Qwen3 DSpark checkpoints (family ``qwen3-dspark``): the Qwen3 target of
``tiny/qwen3_eagle3.py`` (three layers, untied head) and a DSpark draft folder as vLLM 0.34's
``Qwen3DSparkForCausalLM.load_weights`` reads it (names without ``model.``, which it prepends):

- ``layers.0.*``: layer 0 of a one-layer transformers ``Qwen3ForCausalLM`` (DFlash's decoder
  layer has Qwen3's names and shapes: ``q_norm``/``k_norm``, no widened attention input);
- ``fc.weight`` (``[hidden, 2 x hidden]``: the target's hidden states after layers 0 and 1,
  ``target_layer_ids``), ``hidden_norm``, ``norm``;
- ``markov_head.markov_w1`` (``[vocab, rank]``, the previous token's embedding) and
  ``markov_head.markov_w2`` (``[vocab, rank]``, the term's head), scaled so that the term is
  of the head's logits' size: the pick after it differs from the head's alone in many rows.

No embedding and no head: vLLM shares the target's (``load_dspark_model``), so the draft's head
is the target's, as for Mistral's EAGLE. ``block_size`` draft tokens per step, the mask token
``<unk>``. Random weights, bf16, built in seconds without network.

Every token has a twin (``TWINS``): rows ``2j`` and ``2j + 1`` of the target's head differ by
1 % noise, closer than the FP8 step, and their Markov rows are equal, so the term never tells
them apart: whichever of each pair the BF16 head prefers, the FP8 head's argmax after the term
often does not, and the engine test can see a pick after the term that is not exact.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny import qwen3_eagle3
from draft_head_fp8.tiny.common import (
    WEIGHTS,
    Randoms,
    TinyPair,
    copy_tokenizer,
    empty_folder,
    rewrite_weights,
    save_model,
    train_tokenizer,
)

ARCHITECTURE = "Qwen3DSparkModel"
TWINS = 1e-2  # how far apart twin rows of the target's head are (relative noise)
MARKOV_RANK = 16
BLOCK_SIZE = 3
TARGET_LAYER_IDS = [0, 1]
MASK_TOKEN_ID = 3  # <unk>: the token vLLM feeds the block's query slots after the anchor
VARIANTS: dict[str, str] = {}


def draft_config() -> dict:
    """One layer of the target's Qwen3 config, named as vLLM's DSpark class for Qwen3, with the
    keys vLLM reads: the Markov rank, the target layers, the mask token, the block size."""
    config = qwen3_eagle3.config(1).to_dict()
    config.update(
        architectures=[ARCHITECTURE],
        markov_rank=MARKOV_RANK,
        target_layer_ids=TARGET_LAYER_IDS,
        mask_token_id=MASK_TOKEN_ID,
        block_size=BLOCK_SIZE,
        target_hidden_size=eagle3.HIDDEN,
        dtype="bfloat16",
    )
    return config


def draft_tensors(seed: int) -> dict:
    import torch
    from transformers import Qwen3ForCausalLM

    rand = Randoms(seed)
    prefix = "model.layers.0."
    layer = {
        "layers.0." + k.removeprefix(prefix): v.detach().to(torch.bfloat16).contiguous()
        for k, v in Qwen3ForCausalLM(qwen3_eagle3.config(1)).state_dict().items()
        if k.startswith(prefix)
    }
    hidden, vocab = eagle3.HIDDEN, eagle3.VOCAB
    return layer | {
        "fc.weight": rand.normal(hidden, len(TARGET_LAYER_IDS) * hidden),
        "hidden_norm.weight": rand.ones(hidden),
        "norm.weight": rand.ones(hidden),
        # term_j = w2_j . w1[prev]: about 0.1 across tokens, half the target head's logits.
        "markov_head.markov_w1.weight": rand.normal(vocab, MARKOV_RANK, std=1.0),
        "markov_head.markov_w2.weight": rand.normal(vocab // 2, MARKOV_RANK, std=0.025)
        .repeat_interleave(2, 0)
        .contiguous(),
    }


def twin_rows(seed: int):
    """An edit for ``rewrite_weights``: row ``2j + 1`` of the target's head becomes row ``2j``
    times (1 + ``TWINS`` N(0, 1))."""
    import torch

    def edit(tensors: dict) -> dict:
        head = tensors["lm_head.weight"].float()
        gen = torch.Generator().manual_seed(seed + 11)
        noise = 1 + TWINS * torch.randn(head[0::2].shape, generator=gen)
        head[1::2] = head[0::2] * noise
        tensors["lm_head.weight"] = head.to(torch.bfloat16)
        return tensors

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the DSpark draft). Refuses folders with
    files."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3ForCausalLM

    out = Path(out)
    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    for folder in (pair.target, pair.assistant):
        empty_folder(folder)
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        train_tokenizer(tok_dir, eagle3.VOCAB)
        save_model(Qwen3ForCausalLM(qwen3_eagle3.config(3)), tok_dir, pair.target)
        rewrite_weights(pair.target, twin_rows(seed))
        save_file(draft_tensors(seed), pair.assistant / WEIGHTS, metadata={"format": "pt"})
        text = json.dumps(draft_config(), indent=2, sort_keys=True) + "\n"
        (pair.assistant / "config.json").write_text(text)
    copy_tokenizer(pair.target, pair.assistant)
    return pair
