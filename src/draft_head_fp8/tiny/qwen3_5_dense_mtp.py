"""Tiny real dense Qwen3.5 checkpoints with one MTP layer (family ``qwen35-dense-mtp``): one
folder, the target and its MTP layer together, as Qwen ships them; bf16 safetensors plus a
tokenizer trained here, built in seconds and without any network. Random weights.

The target is a transformers ``Qwen3_5ForCausalLM`` (the dense text model: a gated-delta-net
layer, then gated full attention, a SwiGLU MLP in every layer), saved and laid out as the
Qwen3.5-MoE builder lays out its own (``tiny.qwen3_next_mtp.build_gdn_mtp``): one full-attention
layer more than its config says, moved to ``mtp.layers.0.*``, beside the glue vLLM's
``Qwen3_5MTP`` loads (``mtp.fc``, ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``,
``mtp.norm``), and ``mtp_num_hidden_layers: 1`` in its config. The shapes are the MoE builder's
(``GDN_MOE``) without the experts.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import TinyPair
from draft_head_fp8.tiny.qwen3_next_mtp import GDN_MOE, build_gdn_mtp

VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}
EXPERTS = ("moe_intermediate_size", "shared_expert_intermediate_size", "num_experts")
DENSE = {k: v for k, v in GDN_MOE.items() if k not in (*EXPERTS, "num_experts_per_tok")}


def config(*, tied: bool):
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(**DENSE, tie_word_embeddings=tied)


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config(tied=tied_target))
    return build_gdn_mtp(out, model, seed, mtp_num_hidden_layers=1)
