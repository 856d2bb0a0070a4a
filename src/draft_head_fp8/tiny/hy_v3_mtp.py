"""Tiny real Hy3 (HY V3) checkpoints with one MTP layer (family ``hy-v3-mtp``): one folder, the
target and its MTP layer together, as Tencent ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is a transformers ``HYV3ForCausalLM`` (a dense first layer, then MoE with a shared
expert; per-head q/k norms) saved with one MoE layer more than its config says: that last layer
is the MTP layer's decoder block (vLLM's ``HYV3MTP`` builds it as a layer past
``first_k_dense_replace``: MoE), kept at ``model.layers.{LAYERS}.*`` beside the glue vLLM loads:
``enorm``, ``hnorm``, ``eh_proj`` (``[hidden, 2 * hidden]``) and ``final_layernorm``. vLLM's
HY V3 reads fields transformers' config does not define (``first_k_dense_replace``,
``expert_hidden_dim``, ``route_norm``, ``qk_norm``): they go into config.json as Tencent's do.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import SMALL_TEXT, TinyPair, build_mtp_target, mtp_glue

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the target's; layer LAYERS is the MTP block
EXPERT = 64  # each routed and shared expert's intermediate size
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}
# What vLLM's HY V3 reads beyond transformers' config: a dense first layer, the experts' size,
# top-k renormalised, the q/k norms transformers' model always has.
VLLM_FIELDS = dict(first_k_dense_replace=1, expert_hidden_dim=EXPERT, route_norm=True,
                   qk_norm=True)  # fmt: skip


def config(*, tied: bool):
    from transformers import HYV3Config

    return HYV3Config(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        num_experts=4,
        num_experts_per_tok=2,
        num_shared_experts=1,
        moe_intermediate_size=EXPERT,
        router_scaling_factor=1.0,
        tie_word_embeddings=tied,
    )


def _mtp_glue(seed: int):
    mtp = f"model.layers.{LAYERS}."  # the MTP block stays where it was saved
    return mtp_glue(
        seed,
        moves=[],
        norms=[f"{mtp}enorm", f"{mtp}hnorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}eh_proj",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import HYV3ForCausalLM

    torch.manual_seed(seed)
    model = HYV3ForCausalLM(config(tied=tied_target))
    mlp_layer_types = model.config.mlp_layer_types[:LAYERS]  # transformers checks the count
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["HYV3ForCausalLM"],
        num_hidden_layers=LAYERS,
        mlp_layer_types=mlp_layer_types,
        num_nextn_predict_layers=1,
        **VLLM_FIELDS,
    )
