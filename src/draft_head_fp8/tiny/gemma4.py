"""Tiny real Gemma 4 checkpoints: a target and its MTP assistant (family ``gemma4-mtp``), bf16
safetensors plus a tokenizer trained here, built in seconds and without any network.

The shapes follow the real Gemma 4 layout (a sliding and a full attention layer, a KV-shared
assistant whose head is tied to its own embedding); only the sizes are small. Weights are random;
the trained pair that ships with the package is ``tiny.shipped_pair()``, made by
``tools/train_tiny_pair.py`` from these configs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from draft_head_fp8.tiny.common import TinyPair, empty_folder, save_model, train_tokenizer

# Small enough to build in seconds, large enough that the head is the assistant's largest matrix.
VOCAB = 2048
TARGET_HIDDEN = 128
DRAFT_HIDDEN = 64
INTERMEDIATE = 256
VARIANTS = {
    "ordered_embeddings": "E2B/E4B-style centroid head (refused)",
    "untied": "head not tied to the draft embedding (refused)",
}


def text_config_kwargs(hidden: int, vocab: int = VOCAB) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        global_head_dim=64,
        sliding_window=64,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def target_config():
    from transformers import Gemma4TextConfig

    config = Gemma4TextConfig(**text_config_kwargs(TARGET_HIDDEN))
    config.architectures = ["Gemma4ForCausalLM"]
    return config


def assistant_config(*, ordered_embeddings: bool = False, untied: bool = False):
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    text = Gemma4TextConfig(**text_config_kwargs(DRAFT_HIDDEN))
    extra = {}
    if ordered_embeddings:
        # E2B/E4B-style centroid head: 64 centroids of 32 tokens, 8 active.
        extra = dict(num_centroids=64, centroid_intermediate_top_k=8)
    config = Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=TARGET_HIDDEN,
        use_ordered_embeddings=ordered_embeddings,
        tie_word_embeddings=not untied,
        **extra,
    )
    config.architectures = ["Gemma4AssistantForCausalLM"]
    return config


def new_pair_folders(out: Path) -> TinyPair:
    """``out/target`` and ``out/assistant`` to write into; never into folders that hold files."""
    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    for folder in (pair.target, pair.assistant):
        empty_folder(folder)
    return pair


def build(
    out: str | os.PathLike,
    *,
    ordered_embeddings: bool = False,
    untied: bool = False,
    seed: int = 0,
) -> TinyPair:
    """Write ``out/target`` and ``out/assistant``. Refuses to write into existing model folders."""
    import torch
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    out = Path(out)
    pair = new_pair_folders(out)
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        train_tokenizer(tok_dir, VOCAB)
        target = Gemma4ForCausalLM(target_config())
        assistant = Gemma4AssistantForCausalLM(
            assistant_config(ordered_embeddings=ordered_embeddings, untied=untied)
        )
        if ordered_embeddings:
            # A real token ordering (a permutation), as the centroid head expects.
            ordering = torch.randperm(VOCAB)
            for name, buf in assistant.named_buffers():
                if name.endswith("token_ordering"):
                    buf.copy_(ordering)
        save_model(target, tok_dir, pair.target)
        save_model(assistant, tok_dir, pair.assistant)
    return pair
