"""Tiny real EXAONE 4.5 checkpoints with one MTP layer (family ``exaone45-mtp``): one folder, the
target and its MTP layer together; bf16 safetensors plus a tokenizer trained here, built in
seconds and without any network. Random weights.

The target is a transformers ``Exaone4_5_ForConditionalGeneration`` (a one-block vision tower,
which the text-only engine never builds, beside an EXAONE 4 language model with full attention
only) saved with one language-model layer more than its text config says; that layer moves to
``mtp.layers.0.*``, beside the glue vLLM's ``Exaone4_5_MTP`` loads (it reads ``mtp.*`` as its
``model.*``, as K-EXAONE's does): ``mtp.fc`` (``[hidden, 2 * hidden]``),
``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden`` and ``mtp.norm``.
"""

from __future__ import annotations

import json
import os

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    SMALL_VISION,
    TinyPair,
    build_mtp_target,
    mtp_glue,
)

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the language model's; the MTP layer is saved as one more and moved
VARIANTS: dict[str, str] = {}
VISION = dict(
    SMALL_VISION, num_key_value_heads=2, out_hidden_size=HIDDEN, fullatt_block_indexes=[0]
)


def config():
    from transformers import Exaone4_5_Config

    text = dict(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        sliding_window=None,
        layer_types=["full_attention"] * (LAYERS + 1),
        tie_word_embeddings=False,
    )
    # vLLM's Exaone4_5_MTP reads the vocabulary's size from the top of the config.
    return Exaone4_5_Config(
        text_config=text,
        vision_config=VISION,
        tie_word_embeddings=False,
        vocab_size=SMALL_TEXT["vocab_size"],
    )


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Exaone4_5_ForConditionalGeneration

    torch.manual_seed(seed)
    model = Exaone4_5_ForConditionalGeneration(config())
    glue = mtp_glue(
        seed,
        moves=[(f"model.language_model.layers.{LAYERS}.", "mtp.layers.0.")],
        norms=["mtp.norm", "mtp.pre_fc_norm_hidden", "mtp.pre_fc_norm_embedding"],
        projection="mtp.fc",
        hidden=HIDDEN,
    )
    pair = build_mtp_target(
        out,
        model,
        glue,
        architectures=["Exaone4_5_ForConditionalGeneration"],
        num_nextn_predict_layers=1,
    )
    path = pair.target / "config.json"
    written = json.loads(path.read_text())
    written["text_config"].update(num_hidden_layers=LAYERS, layer_types=["full_attention"] * LAYERS)
    path.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    return pair
