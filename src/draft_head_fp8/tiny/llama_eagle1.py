"""Tiny real Llama EAGLE-1 checkpoints (family ``llama-eagle1``): a Llama target with an untied
head, and an EAGLE-1 draft folder holding one decoder layer and ``fc`` and nothing else (no
embedding, no head: vLLM shares both from the target), bf16 safetensors plus a tokenizer trained
here, built in seconds and without any network. Random weights; the trained pair that ships with
the package is ``tiny.shipped_pair("llama-eagle1")``, made by ``tools/train_eagle_pair.py`` from
these configs and saved by ``save_draft``.

The draft is saved as transformers writes a one-layer ``LlamaForCausalLM``, then cut to what
vLLM's ``EagleLlamaForCausalLM.load_weights`` reads: ``layers.0.*`` (no input norm) and
``fc.weight`` (``[hidden, 2 * hidden]``: the embedding and the target's hidden state, joined).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    Randoms,
    TinyPair,
    new_pair,
    rewrite_weights,
    save_model,
    update_config,
)

VOCAB = SMALL_TEXT["vocab_size"]
HIDDEN = SMALL_TEXT["hidden_size"]
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(layers: int, *, tied: bool = False):
    from transformers import LlamaConfig

    return LlamaConfig(
        **SMALL_TEXT,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        tie_word_embeddings=tied,
        architectures=["LlamaForCausalLM"],
    )


def _draft_tensors(fc_weight):
    def edit(tensors: dict) -> dict:
        import torch

        # EAGLE-1's first layer takes the fused input as it is: vLLM builds it without an input
        # norm, and refuses a checkpoint that has one.
        kept = {
            k.removeprefix("model."): v
            for k, v in tensors.items()
            if ".layers.0." in k and "input_layernorm" not in k
        }
        kept["fc.weight"] = fc_weight.detach().to(torch.bfloat16)
        return kept

    return edit


def save_draft(model, fc_weight, tokenizer_dir: Path, folder: Path) -> None:
    """Write an EAGLE-1 draft into ``folder``: ``model`` (a one-layer ``LlamaForCausalLM`` of
    ``config(1)`` whose layer 0 is the draft's) saved as transformers writes it, then cut to what
    vLLM reads: ``layers.0.*`` without the input norm, and ``fc.weight`` (``[hidden, 2 * hidden]``,
    applied to ``cat(embedding, target hidden state)``), bf16."""
    save_model(model, tokenizer_dir, folder)
    rewrite_weights(folder, _draft_tensors(fc_weight))
    update_config(folder, tie_word_embeddings=False)


def build_eagle1_pair(
    out: str | os.PathLike,
    *,
    seed: int,
    target: Callable[[], Any],
    draft: Callable[[], Any],
    edit: Callable[[dict], dict],
    target_changes: dict | None = None,
    **config_changes: Any,
) -> TinyPair:
    """``out/target`` (the transformers model ``target()`` makes, seeded; its config told
    ``target_changes``) and ``out/assistant``: ``draft()`` saved as transformers writes it, then
    ``edit`` cut to what vLLM's EAGLE-1 class reads and its config told ``config_changes``; one
    tokenizer trained here for both. Refuses folders with files."""
    with new_pair(Path(out), seed=seed, vocab=VOCAB) as (pair, tok_dir):
        save_model(target(), tok_dir, pair.target)
        save_model(draft(), tok_dir, pair.assistant)
    rewrite_weights(pair.assistant, edit)
    update_config(pair.assistant, tie_word_embeddings=False, **config_changes)
    if target_changes:
        update_config(pair.target, **target_changes)
    return pair


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import LlamaForCausalLM

    fc_weight = Randoms(seed).normal(HIDDEN, 2 * HIDDEN)
    return build_eagle1_pair(
        out, seed=seed, target=lambda: LlamaForCausalLM(config(2, tied=tied_target)),
        draft=lambda: LlamaForCausalLM(config(1)), edit=_draft_tensors(fc_weight),
    )  # fmt: skip
