"""Tiny real GLM-4.5 checkpoints with one MTP layer (family ``glm45-mtp``): one folder, the target
and its MTP layer together, as GLM ships them; bf16 safetensors plus a tokenizer trained here,
built in seconds and without any network. Random weights.

The target is a transformers ``Glm4MoeForCausalLM`` (a dense first layer, then MoE with a shared
expert) saved with one layer more than its config says: that last layer is the MTP layer's
decoder block, with DeepSeek-style glue beside it (``tiny.common.deepseek_style_mtp_glue``).
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


def config(*, tied: bool):
    from transformers import Glm4MoeConfig

    return Glm4MoeConfig(
        **SMALL_TEXT,
        **DEEPSEEK_STYLE_MOE,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        partial_rotary_factor=0.5,
        attention_bias=True,
        use_qk_norm=False,
        tie_word_embeddings=tied,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Glm4MoeForCausalLM

    torch.manual_seed(seed)
    model = Glm4MoeForCausalLM(config(tied=tied_target))
    glue = deepseek_style_mtp_glue(seed, LAYERS, HIDDEN, tied=tied_target)
    return build_mtp_target(
        out,
        model,
        glue,
        architectures=["Glm4MoeForCausalLM"],
        num_hidden_layers=LAYERS,
        num_nextn_predict_layers=1,
    )
