"""Tiny real ERNIE-4.5 MoE checkpoints with one MTP layer (family ``ernie45-mtp``): one folder,
the target and its MTP layer together, as Baidu ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is a transformers ``Ernie4_5_MoeForCausalLM`` (a dense first layer, then MoE with a
shared expert) saved with one dense layer more than its config says; that layer moves to
``model.mtp_block.0.*``, beside the glue vLLM's ``ErnieMTP`` loads (its ``hf_to_vllm_mapper``
reads ``model.mtp_{emb_norm,hidden_norm,linear_proj}.0.``): ``mtp_emb_norm``,
``mtp_hidden_norm`` and ``mtp_linear_proj`` (``[hidden, 2 * hidden]``). vLLM's MTP block is a
Llama decoder layer, so the moved layer is a dense one (the MoE ends a layer before it).
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
LAYERS = 2  # the target's; the MTP block is saved as one more (dense) layer and moved
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import Ernie4_5_MoeConfig

    return Ernie4_5_MoeConfig(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        moe_intermediate_size=64,
        moe_num_experts=4,
        moe_k=2,
        moe_num_shared_experts=1,
        moe_layer_start_index=1,
        moe_layer_end_index=LAYERS - 1,  # the extra layer stays dense: it becomes the MTP block
        tie_word_embeddings=tied,  # ERNIE's default is tied
    )


def _mtp_glue(seed: int):
    return mtp_glue(
        seed,
        moves=[(f"model.layers.{LAYERS}.", "model.mtp_block.0.")],
        norms=["model.mtp_emb_norm.0", "model.mtp_hidden_norm.0"],
        projection="model.mtp_linear_proj.0",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Ernie4_5_MoeForCausalLM

    torch.manual_seed(seed)
    model = Ernie4_5_MoeForCausalLM(config(tied=tied_target))
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["Ernie4_5_MoeForCausalLM"],
        num_hidden_layers=LAYERS,
        num_nextn_predict_layers=1,
    )
