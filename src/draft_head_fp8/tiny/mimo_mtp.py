"""Tiny real MiMo checkpoints with one MTP layer (family ``mimo-mtp``): one folder, the target
and its MTP layer together, as MiMo ships them; bf16 safetensors plus a tokenizer trained here,
built in seconds and without any network. Random weights.

transformers has no MiMo class: the target is saved as a ``Qwen2ForCausalLM`` (MiMo's body is
Qwen2's) and named ``MiMoForCausalLM``; the MTP layer is a second Qwen2 decoder layer moved to
``model.mtp_layers.0.*`` (the names vLLM's ``MiMoMTP.load_weights`` maps onto its
``mtp_block``), with the glue MiMo adds around it: ``token_layernorm``, ``hidden_layernorm``,
``input_proj`` (``[hidden, 2 * hidden]``) and ``final_layernorm``.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    TinyPair,
    build_mtp_target,
    mtp_glue,
)

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the target's; the MTP layer is saved as one more and moved
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import Qwen2Config

    return Qwen2Config(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )


def _mtp_glue(seed: int):
    mtp = "model.mtp_layers.0."
    return mtp_glue(
        seed,
        moves=[(f"model.layers.{LAYERS}.", mtp)],
        norms=[f"{mtp}token_layernorm", f"{mtp}hidden_layernorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}input_proj",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config(tied=tied_target))
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["MiMoForCausalLM"],
        num_hidden_layers=LAYERS,
        layer_types=["full_attention"] * LAYERS,  # transformers checks it against the count
        num_nextn_predict_layers=1,
    )
