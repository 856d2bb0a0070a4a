"""Tiny real GLM-4.5 checkpoints with one MTP layer (family ``glm45-mtp``): one folder, the target
and its MTP layer together, as GLM ships them; bf16 safetensors plus a tokenizer trained here,
built in seconds and without any network. Random weights.

The target is a transformers ``Glm4MoeForCausalLM`` (a dense first layer, then MoE with a shared
expert) saved with one layer more than its config says: that last layer is the MTP layer's
decoder block, with DeepSeek-style glue beside it (``tiny.common.deepseek_style_mtp_glue``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from draft_head_fp8.tiny.common import (
    TinyPair,
    deepseek_style_mtp_glue,
    empty_folder,
    rewrite_weights,
    save_model,
    train_tokenizer,
    update_config,
)

VOCAB = 2048
HIDDEN = 128
LAYERS = 2  # the target's; layer LAYERS is the MTP block
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import Glm4MoeConfig

    return Glm4MoeConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.0,
        norm_topk_prob=True,
        partial_rotary_factor=0.5,
        attention_bias=True,
        use_qk_norm=False,
        max_position_embeddings=2048,  # compare asks for 1024 by default
        tie_word_embeddings=tied,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Glm4MoeForCausalLM

    out = Path(out)
    target = empty_folder(out / "target")
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        train_tokenizer(tok_dir, VOCAB)
        save_model(Glm4MoeForCausalLM(config(tied=tied_target)), tok_dir, target)
    rewrite_weights(target, deepseek_style_mtp_glue(seed, LAYERS, HIDDEN, tied=tied_target))
    update_config(
        target, architectures=["Glm4MoeForCausalLM"], num_hidden_layers=LAYERS,
        num_nextn_predict_layers=1,
    )  # fmt: skip
    return TinyPair(target=target, assistant=target)
