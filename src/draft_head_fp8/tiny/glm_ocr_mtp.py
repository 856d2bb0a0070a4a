"""Tiny real GLM-OCR checkpoints with one MTP layer (family ``glm-ocr-mtp``): one folder, the
target and its MTP layer together; bf16 safetensors plus a tokenizer trained here, built in
seconds and without any network. Random weights.

The target is a transformers ``GlmOcrForConditionalGeneration`` (a one-block vision tower, which
the text-only engine never builds, beside a GLM-4 language model) saved with one language-model
layer more than its text config says: that layer, ``model.language_model.layers.{N}``, is the MTP
layer's decoder block, with DeepSeek-style glue beside it (``enorm``, ``hnorm``, ``eh_proj``,
``shared_head.norm``), the names vLLM's ``GlmOcrMTP.load_weights`` reads (it loads the
checkpoint's ``lm_head.weight`` into ``shared_head.head``, which vLLM replaces by the target's at
the share). The MTP layer count is in the text config (what vLLM builds from) and at the top
(what its config rewrite reads).
"""

from __future__ import annotations

import json
import os

from draft_head_fp8.tiny.common import SMALL_TEXT, SMALL_VISION, Randoms, TinyPair, build_mtp_target

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the language model's; layer LAYERS is the MTP block
VARIANTS: dict[str, str] = {}
VISION = dict(SMALL_VISION, out_hidden_size=HIDDEN)


def config():
    from transformers import GlmOcrConfig

    text = dict(
        **SMALL_TEXT,
        num_hidden_layers=LAYERS + 1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    return GlmOcrConfig(text_config=text, vision_config=VISION, tie_word_embeddings=False)


def _glue(seed: int):
    rand = Randoms(seed)
    mtp = f"model.language_model.layers.{LAYERS}."

    def edit(tensors: dict) -> dict:
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            tensors[f"{mtp}{norm}.weight"] = rand.ones(HIDDEN)
        tensors[f"{mtp}eh_proj.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
        return tensors

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import GlmOcrForConditionalGeneration

    torch.manual_seed(seed)
    model = GlmOcrForConditionalGeneration(config())
    model.config.vocab_size = SMALL_TEXT["vocab_size"]  # read by the tokenizer's training
    pair = build_mtp_target(
        out,
        model,
        _glue(seed),
        architectures=["GlmOcrForConditionalGeneration"],
        num_nextn_predict_layers=1,
    )
    path = pair.target / "config.json"
    written = json.loads(path.read_text())
    written["text_config"].update(num_hidden_layers=LAYERS, num_nextn_predict_layers=1)
    path.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    return pair
