"""Tiny real Mistral EAGLE-1 checkpoints (family ``mistral-eagle1``): a Mistral target with an
untied head, and an EAGLE-1 draft folder as vLLM's ``EagleMistralForCausalLM`` reads it (Hugging
Face names, through ``MistralForCausalLM.load_weights``): one Mistral decoder layer
``model.layers.0.*`` (input norm included), ``model.norm.weight`` and ``model.fc.weight``
(``[hidden, 2 * hidden]``: the embedding and the target's hidden state, joined); no embedding and
no head (vLLM shares both from the target). Saved as transformers writes a one-layer
``MistralForCausalLM``, then cut (``llama_eagle1.build_eagle1_pair``). Random weights, bf16.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import SMALL_TEXT, Randoms, TinyPair
from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, build_eagle1_pair

VARIANTS: dict[str, str] = {}


def config(layers: int):
    from transformers import MistralConfig

    return MistralConfig(
        **SMALL_TEXT, num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, sliding_window=None, tie_word_embeddings=False,
        architectures=["MistralForCausalLM"],
    )  # fmt: skip


def draft_tensors(fc_weight):
    def edit(tensors: dict) -> dict:
        layer = ("model.layers.0.", "model.norm.")
        kept = {k: v for k, v in tensors.items() if k.startswith(layer)}
        kept["model.fc.weight"] = fc_weight
        return kept

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import MistralForCausalLM

    return build_eagle1_pair(
        out, seed=seed, target=lambda: MistralForCausalLM(config(2)),
        draft=lambda: MistralForCausalLM(config(1)),
        edit=draft_tensors(Randoms(seed).normal(HIDDEN, 2 * HIDDEN)),
    )  # fmt: skip
