"""Tiny real GLM-4.7-Flash checkpoints with one MTP layer (family ``glm4-moe-lite-mtp``): one
folder, the target and its MTP layer together, as GLM ships them; bf16 safetensors plus a
tokenizer trained here, built in seconds and without any network. Random weights.

The target is a transformers ``Glm4MoeLiteForCausalLM`` (DeepSeek-style MLA attention, a dense
first layer, then MoE with a shared expert) saved with one layer more than its config says: that
last layer is the MTP layer's decoder block, with DeepSeek-style glue beside it
(``tiny.common.deepseek_style_mtp_glue``), the names vLLM's ``Glm4MoeLiteMTP.load_weights``
reads. vLLM's CPU MLA takes ``kv_lora_rank=512`` with ``qk_rope_head_dim=64``, as for
DeepSeek-V3's tiny checkpoint.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import (
    DEEPSEEK_STYLE_MOE,
    SMALL_TEXT,
    TinyPair,
    build_mtp_target,
    deepseek_style_mtp_glue,
)

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the target's; layer LAYERS is the MTP block
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}
# The MLA shape vLLM's CPU attention accepts.
CPU_MLA = dict(
    kv_lora_rank=512,
    q_lora_rank=None,
    qk_rope_head_dim=64,
    qk_nope_head_dim=64,
    v_head_dim=64,
)


def config(*, tied: bool):
    from transformers import Glm4MoeLiteConfig

    return Glm4MoeLiteConfig(
        **SMALL_TEXT,
        **DEEPSEEK_STYLE_MOE,
        **CPU_MLA,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Glm4MoeLiteForCausalLM

    torch.manual_seed(seed)
    model = Glm4MoeLiteForCausalLM(config(tied=tied_target))
    glue = deepseek_style_mtp_glue(seed, LAYERS, HIDDEN, tied=tied_target)
    mlp_layer_types = model.config.mlp_layer_types[:LAYERS]  # transformers checks the count
    return build_mtp_target(
        out,
        model,
        glue,
        architectures=["Glm4MoeLiteForCausalLM"],
        num_hidden_layers=LAYERS,
        mlp_layer_types=mlp_layer_types,
        num_nextn_predict_layers=1,
    )
