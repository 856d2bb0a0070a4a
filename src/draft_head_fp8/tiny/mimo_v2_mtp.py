"""Tiny real MiMo-V2-Flash checkpoints with one MTP layer (family ``mimo-v2-mtp``): one folder,
the target and its MTP layer together, as Xiaomi ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is a transformers ``MiMoV2FlashForCausalLM`` (a dense first layer, then MoE) with
full attention only and V's head size equal to K's (vLLM's sliding-window layers with attention
sinks, and a V head size of its own, pick CUDA attention backends; the drafter never reads the
target's attention, only its hidden states, embedding and head), saved with one dense layer more
than its config says; that layer moves to ``model.mtp.layers.0.*`` (its
``post_attention_layernorm`` named ``pre_mlp_layernorm``, as vLLM's ``MiMoV2MTP`` loads it),
beside the glue: ``enorm``, ``hnorm``, ``eh_proj`` (``[hidden, 2 * hidden]``) and
``final_layernorm``. vLLM's MiMo-V2 reads the remote-code config's fields, which transformers'
config does not define (``layernorm_epsilon``, ``hybrid_layer_pattern``, ``moe_layer_freq``, the
``swa_*`` shapes the MTP layer's attention takes): they go into config.json as Xiaomi's do.
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
HEADS, KV_HEADS, HEAD_DIM = 2, 1, 64
VARIANTS: dict[str, str] = {}  # no tied target: vLLM's MiMo-V2 target never ties its head
# vLLM's rope defaults where the config names no top-level rope_theta / partial_rotary_factor.
ROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "partial_rotary_factor": 1.0}
# What vLLM's MiMo-V2 reads beyond transformers' config: every layer full attention (0), the
# second one MoE, and the MTP layer's attention shapes (the "swa" ones, here the same).
VLLM_FIELDS = dict(
    layernorm_epsilon=1e-5,
    hybrid_layer_pattern=[0] * LAYERS,
    moe_layer_freq=[0, 1],
    swa_num_attention_heads=HEADS,
    swa_num_key_value_heads=KV_HEADS,
    swa_head_dim=HEAD_DIM,
    swa_v_head_dim=HEAD_DIM,
)


def config():
    from transformers import MiMoV2FlashConfig

    return MiMoV2FlashConfig(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        v_head_dim=HEAD_DIM,
        layer_types=["full_attention"] * (LAYERS + 1),
        mlp_layer_types=["dense", "sparse", "dense"],
        rope_parameters={"full_attention": ROPE, "sliding_attention": ROPE},
        moe_intermediate_size=64,
        n_routed_experts=4,
        num_experts_per_tok=2,
    )


def _mtp_glue(seed: int):
    mtp = "model.mtp.layers.0."
    return mtp_glue(
        seed,
        moves=[
            (f"model.layers.{LAYERS}.", mtp),
            (f"{mtp}post_attention_layernorm.", f"{mtp}pre_mlp_layernorm."),
        ],
        norms=[f"{mtp}enorm", f"{mtp}hnorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}eh_proj",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import MiMoV2FlashForCausalLM

    torch.manual_seed(seed)
    model = MiMoV2FlashForCausalLM(config())
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["MiMoV2FlashForCausalLM"],
        num_hidden_layers=LAYERS,
        layer_types=["full_attention"] * LAYERS,
        mlp_layer_types=["dense", "sparse"],
        num_nextn_predict_layers=1,
        **VLLM_FIELDS,
    )
