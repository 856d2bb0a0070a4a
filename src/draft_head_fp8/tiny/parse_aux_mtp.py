"""Tiny real Nemotron Parse 3.5 checkpoints with its auxiliary MTP step (family
``parse-aux-mtp``): one folder, the target and its MTP projections together; bf16 safetensors plus
a tokenizer trained here, built in seconds and without any network. Random weights.

The target is what vLLM's ``RadioMBartPrefixForCausalLM`` loads: a ``vision-encoder-decoder``
config (a RADIO tower, an MBart decoder with ``causal_vision_prefix`` and no cross-attention,
``navit_packing``). Its tensors are transformers' own: a ``RadioModel`` (under
``encoder.model_encoder.``, native names, which vLLM's RADIO loader maps) and an
``MBartForCausalLM`` (its ``model.decoder.`` under ``decoder.``, less the cross-attention
transformers' MBart layers always build, its head as ``lm_head``), with
the neck between them (``encoder.conv1`` ...) and the MTP step's two projections
(``decoder.extra_proj.0``, ``decoder.extra_heads.0``) added as seeded random tensors, the names
vLLM's loaders read. vLLM sizes its RADIO tower from the timm name in ``encoder.args`` only
(``vit_small_patch16_224``: 384 wide, 12 blocks, the smallest it knows), so the tower is that
size; the text-only engine runs never run it. The decoder's head is its own (untied), as
``tie_word_embeddings`` False at the top and in the decoder say.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    SPECIAL_IDS,
    WEIGHTS,
    Randoms,
    TinyPair,
    empty_folder,
    train_tokenizer,
)

HIDDEN = SMALL_TEXT["hidden_size"]
VOCAB = SMALL_TEXT["vocab_size"]
# vLLM's RADIO dimensions for this timm name (transformers' config must say the same).
RADIO_NAME = "vit_small_patch16_224"
RADIO = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4.0)
PATCH = 16
IMAGE_SIZE = [32, 64]  # two patch rows, four columns: three image tokens
VARIANTS: dict[str, str] = {}


def radio_config():
    from transformers import RadioConfig

    # One class token, no registers, no summary selection: what vLLM's RadioConfig derives
    # from args without teachers, so both towers hold the same tensors.
    return RadioConfig(
        **RADIO, patch_size=PATCH, num_cls_tokens=1, num_registers=0, summary_idxs=[0],
        max_img_size=2048,
    )  # fmt: skip


def decoder_config():
    from transformers import MBartConfig

    return MBartConfig(
        vocab_size=VOCAB, d_model=HIDDEN, decoder_layers=2, decoder_attention_heads=2,
        decoder_ffn_dim=2 * HIDDEN, encoder_layers=1, activation_function="gelu",
        scale_embedding=True, max_position_embeddings=512, is_decoder=True,
        add_cross_attention=False, causal_vision_prefix=True, tie_word_embeddings=False,
        decoder_start_token_id=SPECIAL_IDS["bos_token_id"], **SPECIAL_IDS,
    )  # fmt: skip


def config() -> dict:
    """The target's config.json, as a Parse 3.5 checkpoint's reads (what vLLM checks)."""
    encoder = {**radio_config().to_dict(), "args": {"model": RADIO_NAME}}
    return {
        "model_type": "vision-encoder-decoder",
        "architectures": ["RadioMBartPrefixForCausalLM"],
        "encoder": encoder,
        "decoder": decoder_config().to_dict(),
        "image_size": IMAGE_SIZE,
        "navit_packing": True,
        "vision_spatial_dim": RADIO["hidden_size"],
        "vision_summary_dim": RADIO["hidden_size"],
        "tie_word_embeddings": False,
        "is_encoder_decoder": True,
        "torch_dtype": "bfloat16",
        "decoder_start_token_id": SPECIAL_IDS["bos_token_id"],
        **SPECIAL_IDS,
    }


def _glue(seed: int) -> dict:
    """The neck between the tower and the decoder, and the MTP step's two projections."""
    rand = Randoms(seed)
    wide = RADIO["hidden_size"]
    tensors = {
        "encoder.conv1.weight": rand.normal(HIDDEN, wide, 1),
        "encoder.conv1.bias": rand.zeros(HIDDEN),
        "encoder.conv2.weight": rand.normal(HIDDEN, HIDDEN, 1, 4),
        "encoder.sum_proj.weight": rand.normal(HIDDEN, wide),
        "encoder.sum_proj.bias": rand.zeros(HIDDEN),
    }
    for norm in ("layer_norm1", "layer_norm2", "layer_norm3"):
        tensors[f"encoder.{norm}.weight"] = rand.ones(HIDDEN)
        tensors[f"encoder.{norm}.bias"] = rand.zeros(HIDDEN)
    for name in ("extra_proj.0", "extra_heads.0"):
        tensors[f"decoder.{name}.weight"] = rand.normal(HIDDEN, HIDDEN)
        tensors[f"decoder.{name}.bias"] = rand.zeros(HIDDEN)
    return tensors


def tensors(seed: int) -> dict:
    """Every tensor of the target, bf16, under the names vLLM's loaders read."""
    import torch
    from transformers import MBartForCausalLM, RadioModel

    torch.manual_seed(seed)
    tower = RadioModel(radio_config()).state_dict()
    decoder = MBartForCausalLM(decoder_config()).state_dict()
    out = {f"encoder.model_encoder.{k}": v for k, v in tower.items()}
    for name, tensor in decoder.items():
        # transformers' MBart layers always build cross-attention; Parse 3.5's have none.
        if name.startswith("model.decoder.") and ".encoder_attn" not in name:
            out["decoder." + name.removeprefix("model.decoder.")] = tensor
    out["lm_head.weight"] = decoder["lm_head.weight"].clone()
    out.update(_glue(seed))
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP step). Refuses a folder with files."""
    from safetensors.torch import save_file

    out = Path(out)
    target = empty_folder(out / "target")
    save_file(tensors(seed), target / WEIGHTS, metadata={"format": "pt"})
    (target / "config.json").write_text(json.dumps(config(), indent=2, sort_keys=True) + "\n")
    (target / "generation_config.json").write_text(
        json.dumps(SPECIAL_IDS, indent=2, sort_keys=True) + "\n"
    )
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        train_tokenizer(tok_dir, VOCAB)
        for path in tok_dir.iterdir():
            (target / path.name).write_bytes(path.read_bytes())
    return TinyPair(target=target, assistant=target)
