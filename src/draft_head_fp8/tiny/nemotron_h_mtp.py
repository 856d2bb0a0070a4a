"""Tiny real Nemotron-H checkpoints with one MTP layer (family ``nemotron-h-mtp``): one folder, the
target and its MTP layer together, as NVIDIA ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is a transformers ``NemotronHForCausalLM`` of an attention block and an MLP block,
without the Mamba-2 blocks of NVIDIA's checkpoints (vLLM's Mamba-2 mixer runs Triton kernels,
which this CPU has only interpreted; the drafter never reads the target's blocks, only its hidden
states, embedding and head), saved with one attention block more than its config says (transformers
writes NVIDIA's names: ``backbone.layers.*``, ``backbone.embeddings``); that block moves to
``mtp.layers.0.*``, the MTP pattern ``*`` (one attention block, vLLM's
``NemotronHMTP``: ``mtp_layers_block_type: ["attention"]``), with the glue vLLM loads beside it:
``enorm``, ``hnorm``, ``eh_proj`` (``[hidden, 2 * hidden]``) and ``final_layernorm``. The
drafter has no embedding and no head of its own: vLLM's proposer hands it the target's.
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
BLOCKS = ["attention", "mlp"]  # the target's; then the block that becomes the MTP layer
VARIANTS = {
    "tied_target": "a target whose head is tied to its embedding (served: hashed against it)",
}


def config(*, tied: bool):
    from transformers import NemotronHConfig

    return NemotronHConfig(
        **SMALL_TEXT,
        layers_block_type=[*BLOCKS, "attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        num_nextn_predict_layers=1,
        mtp_layers_block_type=["attention"],
        tie_word_embeddings=tied,
    )


def mtp_layer_glue(seed: int):
    """The edit that moves the extra block to the MTP layer, with its glue."""
    mtp = "mtp.layers.0."
    return mtp_glue(
        seed,
        moves=[(f"backbone.layers.{len(BLOCKS)}.", mtp)],
        norms=[f"{mtp}enorm", f"{mtp}hnorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}eh_proj",
        hidden=HIDDEN,
    )


def build(out: str | os.PathLike, *, tied_target: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import NemotronHForCausalLM

    torch.manual_seed(seed)
    model = NemotronHForCausalLM(config(tied=tied_target))
    return build_mtp_target(
        out,
        model,
        mtp_layer_glue(seed),
        architectures=["NemotronHForCausalLM"],
        layers_block_type=BLOCKS,
        num_hidden_layers=len(BLOCKS),
        num_nextn_predict_layers=1,
    )
