"""Tiny real Llama 4 EAGLE-1 checkpoints (family ``llama4-eagle1``): a text-only Llama 4 target
(``llama4_text``: dense layers, no chunked attention, RoPE on every layer; untied head), and an
EAGLE-1 draft folder as vLLM's ``EagleLlama4ForCausalLM`` reads it: one Llama 4 decoder layer
``layers.0.*``, ``fc.weight`` (``[hidden, 2 * hidden]``) and ``norm.weight``; no embedding and
no head (vLLM shares both from the target). Its config is the target's cut to one layer, with
what vLLM's draft asserts or reads (``moe_layers`` empty, ``yoco_*_kv_layer`` None,
``draft_vocab_size``). Saved as transformers writes a one-layer ``Llama4ForCausalLM``, then cut
(``llama_eagle1.build_eagle1_pair``). Random weights, bf16.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import SMALL_TEXT, Randoms, TinyPair, move_layer
from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, VOCAB, build_eagle1_pair

VARIANTS: dict[str, str] = {}


def config(layers: int):
    from transformers import Llama4TextConfig

    return Llama4TextConfig(
        **SMALL_TEXT, intermediate_size_mlp=SMALL_TEXT["intermediate_size"],
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        interleave_moe_layer_step=0, moe_layers=[], attention_chunk_size=None,
        no_rope_layers=[1] * layers, tie_word_embeddings=False,
        architectures=["Llama4ForCausalLM"],
    )  # fmt: skip


def _draft_tensors(rand: Randoms):
    def edit(tensors: dict) -> dict:
        kept = {k: v for k, v in tensors.items() if k.startswith("model.layers.0.")}
        kept = move_layer(kept, "model.layers.0.", "layers.0.")
        kept["norm.weight"] = tensors["model.norm.weight"]
        kept["fc.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
        return kept

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import Llama4ForCausalLM

    return build_eagle1_pair(
        out, seed=seed, target=lambda: Llama4ForCausalLM(config(2)),
        draft=lambda: Llama4ForCausalLM(config(1)), edit=_draft_tensors(Randoms(seed)),
        yoco_global_kv_layer=None, yoco_local_kv_layer=None, draft_vocab_size=VOCAB,
    )  # fmt: skip
