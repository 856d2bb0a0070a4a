"""Tiny real Qwen3 EAGLE-3 checkpoints (family ``qwen3-eagle3``): a Qwen3 target with an untied head
(three layers, so vLLM's default auxiliary layers are three different hidden states), and an
EAGLE-3 draft folder as vLLM's ``Eagle3Qwen3ForCausalLM.load_weights`` reads it: ``midlayer.*``
(layer 0 of a one-layer transformers ``Qwen3ForCausalLM``, ``q_norm``/``k_norm`` included, its
``q_proj``/``k_proj``/``v_proj`` reading ``2 x hidden``, ``hidden_norm`` added), ``fc``, ``norm``
and the head by variant, as ``tiny/llama_eagle3.py`` writes them (``build_pair``). The draft's
config is the target's Qwen3 config cut to one layer, named ``Eagle3Qwen3ForCausalLM``. No
embedding: vLLM shares the target's. Random weights, bf16, built in seconds without network.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny.common import SMALL_TEXT, Randoms, TinyPair

ARCHITECTURE = "Eagle3Qwen3ForCausalLM"
VARIANTS = eagle3.VARIANTS


def config(layers: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        **SMALL_TEXT,
        num_hidden_layers=layers,
        num_attention_heads=eagle3.HEADS,
        num_key_value_heads=eagle3.KV_HEADS,
        head_dim=eagle3.HEAD_DIM,
        tie_word_embeddings=False,
        architectures=["Qwen3ForCausalLM"],
    )


def draft_config(draft_vocab: int | None) -> dict:
    """One layer of the target's config, named as vLLM's EAGLE-3 class for Qwen3."""
    draft = config(1).to_dict()
    draft.update(architectures=[ARCHITECTURE], target_hidden_size=eagle3.HIDDEN, dtype="bfloat16")
    if draft_vocab is not None:
        draft["draft_vocab_size"] = draft_vocab
    return draft


def draft(seed: int, draft_vocab: int | None, *, own_head: bool) -> tuple[dict, dict]:
    from transformers import Qwen3ForCausalLM

    rand = Randoms(seed)
    layer = eagle3.decoder_layer(Qwen3ForCausalLM(config(1)), rand, ("q_proj", "k_proj", "v_proj"))
    tensors = layer | eagle3.eagle3_glue(rand, seed, draft_vocab, own_head=own_head)
    return tensors, draft_config(draft_vocab)


def build(
    out: str | os.PathLike,
    *,
    shared_head: bool = False,
    full_vocab_own_head: bool = False,
    seed: int = 0,
) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE-3 draft). By default the draft has
    its own head over half the target's vocabulary. Refuses folders with files."""
    from transformers import Qwen3ForCausalLM

    return eagle3.build_pair(
        out, seed=seed, target=lambda: Qwen3ForCausalLM(config(3)),
        draft=lambda vocab: draft(seed, vocab, own_head=not shared_head),
        shared_head=shared_head, full_vocab_own_head=full_vocab_own_head,
    )  # fmt: skip
