"""Tiny real K-EXAONE (EXAONE MoE) checkpoints with one MTP layer (family ``exaone-moe-mtp``):
one folder, the target and its MTP layer together, as LG AI Research ships them; bf16
safetensors plus a tokenizer trained here, built in seconds and without any network. Random
weights.

The target is a transformers ``ExaoneMoeForCausalLM`` (a dense first layer, then MoE with a
shared expert; full attention with per-head q/k norms) saved with one dense layer more than its
config says; that layer moves to ``mtp.layers.0.*``, beside the glue vLLM's ``ExaoneMoeMTP``
loads (it reads ``mtp.*`` as its ``model.*``): ``mtp.fc`` (``[hidden, 2 * hidden]``),
``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden`` and ``mtp.norm``. vLLM builds the MTP
layer's MLP dense (``is_mtp``), so the moved layer is a dense one.
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
LAYERS = 2  # the target's; the MTP layer is saved as one more (dense) layer and moved
MLP_LAYER_TYPES = ["dense", "sparse"]  # the target's; then the dense layer that becomes MTP
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import ExaoneMoeConfig

    return ExaoneMoeConfig(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        layer_types=["full_attention"] * (LAYERS + 1),
        mlp_layer_types=[*MLP_LAYER_TYPES, "dense"],
        moe_intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
        num_shared_experts=1,
        routed_scaling_factor=1.0,
        tie_word_embeddings=tied,
    )


def _mtp_glue(seed: int):
    return mtp_glue(
        seed,
        moves=[(f"model.layers.{LAYERS}.", "mtp.layers.0.")],
        norms=["mtp.norm", "mtp.pre_fc_norm_hidden", "mtp.pre_fc_norm_embedding"],
        projection="mtp.fc",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import ExaoneMoeForCausalLM

    torch.manual_seed(seed)
    model = ExaoneMoeForCausalLM(config(tied=tied_target))
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["ExaoneMoeForCausalLM"],
        num_hidden_layers=LAYERS,
        layer_types=["full_attention"] * LAYERS,
        mlp_layer_types=MLP_LAYER_TYPES,
        num_nextn_predict_layers=1,
    )
