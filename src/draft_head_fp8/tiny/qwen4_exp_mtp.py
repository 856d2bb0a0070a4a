"""Tiny real Qwen4-Exp checkpoints with one MTP layer (family ``qwen4-exp-mtp``): one folder, the
target and its MTP layer together, as Qwen ships them; bf16 safetensors plus a tokenizer trained
here, built in seconds and without any network. Random weights.

The target is a transformers ``Qwen4ExpForCausalLM`` (the text model alone: MoE with a shared
expert, two hyper-connection streams around every block, collapsed by a final mixer), plain: one
full-attention layer and no gated-delta-net layer (Qwen3.5's and Qwen3-Next's engine runs cover
those, and each of their interpreted kernels costs time on every step; the head's share never
reads them), no sparse attention (QSA's indexer off: ``indexer_*`` null, so vLLM builds
Qwen3-Next's attention there) and no per-layer embeddings (``ple_layer_ids`` empty).
transformers builds a QSA indexer on every attention layer whatever the config says; its tensors
are left out. Saved with one attention layer more than its config says, that layer moves to
``mtp.layers.0.*``, beside the glue vLLM's ``Qwen4ExpMTP`` loads: ``mtp.fc_embedding`` and
``mtp.fc_hidden`` (``[hidden, hidden]``: the embedding's and each stream's projection),
``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden`` (over every stream) and the MTP's own
final mixer ``mtp.hyper_connection_mixer.*`` (a copy of the target's). Qwen4-Exp's norms scale by
``1 + weight``: zeros.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import Randoms, TinyPair, build_mtp_target, move_layer
from draft_head_fp8.tiny.qwen3_next_mtp import GDN_MOE

HIDDEN = GDN_MOE["hidden_size"]
STREAMS = 2  # hc_count: Qwen4-Exp needs more than one
# vLLM merges each mixer's down projection and injection into one GEMM padded to 16 rows; the
# padding is a shard of its own it expects in the checkpoint unless none is needed.
LOW_RANK = 16 - STREAMS
LAYER_TYPES = ["indexed_attention"]  # the target's; then the MTP layer, another
VARIANTS: dict[str, str] = {}
# What transformers needs to build the indexer it always builds; written back as null.
QSA = dict(indexer_n_heads=1, indexer_kv_heads=1, indexer_head_dim=64, indexer_budget=64,
           indexer_compress_ratio=4)  # fmt: skip


def config():
    from transformers import Qwen4ExpTextConfig

    shape = {k: v for k, v in GDN_MOE.items() if k not in ("layer_types", "num_hidden_layers")}
    return Qwen4ExpTextConfig(
        **shape,
        **QSA,
        num_hidden_layers=len(LAYER_TYPES) + 1,
        layer_types=[*LAYER_TYPES, "indexed_attention"],
        hc_count=STREAMS,
        hc_lowrank=LOW_RANK,
        # transformers falls back to hidden_act where this is unset, vLLM needs it said.
        output_gate_type="silu",
        tie_word_embeddings=False,
    )


def _mtp_glue(seed: int):
    rand = Randoms(seed)
    last = len(LAYER_TYPES)

    def edit(tensors: dict) -> dict:
        kept = {k: v for k, v in tensors.items() if ".self_attn.indexer." not in k}
        moved = move_layer(kept, f"model.layers.{last}.", "mtp.layers.0.")
        for name in ("fc_embedding", "fc_hidden"):
            moved[f"mtp.{name}.weight"] = rand.normal(HIDDEN, HIDDEN)
        moved["mtp.pre_fc_norm_embedding.weight"] = rand.zeros(HIDDEN)
        moved["mtp.pre_fc_norm_hidden.weight"] = rand.zeros(STREAMS * HIDDEN)
        mixer = "model.hyper_connection_mixer."
        for name, tensor in list(moved.items()):
            if name.startswith(mixer):
                moved["mtp." + name.removeprefix("model.")] = tensor.clone()
        return moved

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen4ExpForCausalLM

    torch.manual_seed(seed)
    model = Qwen4ExpForCausalLM(config())
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["Qwen4ExpForCausalLM"],
        num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES,
        mtp_num_hidden_layers=1,
        **{k: None for k in QSA},
    )
