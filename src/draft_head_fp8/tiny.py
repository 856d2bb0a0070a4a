"""Tiny real Gemma 4 checkpoints for tests, the demo and benchmarks: a target and its MTP assistant,
bf16 safetensors plus a tokenizer trained here, built in seconds and without any network.

The shapes follow the real Gemma 4 layout (a sliding and a full attention layer, a KV-shared
assistant whose head is tied to its own embedding); only the sizes are small. Weights are random
unless a trained pair is asked for: ``shipped_pair()`` is the one trained by
``tools/train_tiny_pair.py`` that ships with the package.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Small enough to build in seconds, large enough that the head is the assistant's largest matrix.
VOCAB = 2048
TARGET_HIDDEN = 128
DRAFT_HIDDEN = 64
INTERMEDIATE = 256
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
DATA_DIR = Path(__file__).resolve().parent / "data" / "tiny_pair"


@dataclass(frozen=True)
class TinyPair:
    target: Path
    assistant: Path


def shipped_pair() -> TinyPair:
    """The trained pair that ships with the package (what the demo runs on)."""
    return TinyPair(target=DATA_DIR / "target", assistant=DATA_DIR / "assistant")


def stdlib_files() -> list[Path]:
    """The standard library's top-level ``.py`` files, sorted: text that ships with Python."""
    import sysconfig

    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def docstrings(path: Path) -> list[tuple[str | None, str]]:
    """(name, docstring) of a source file's module, classes and functions, in ``ast.walk``
    order, read from source (nothing is imported); the module's name is None."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                found.append((getattr(node, "name", None), doc))
    return found


def tokenizer_corpus() -> list[str]:
    """The tokenizer's training text: every non-blank docstring line of ``stdlib_files()``."""
    lines: list[str] = []
    for path in stdlib_files():
        for _, doc in docstrings(path):
            lines.extend(line.strip() for line in doc.splitlines() if line.strip())
    return lines


def train_tokenizer(out: Path, vocab_size: int = VOCAB) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
    )
    fast.save_pretrained(out)


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


def save_model(model, tokenizer_dir: Path, out: Path) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    model = model.to(torch.bfloat16)
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a bar per 1 MB file is noise in tests and the demo
    try:
        model.save_pretrained(out, safe_serialization=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    for name in os.listdir(tokenizer_dir):
        shutil.copy2(tokenizer_dir / name, out / name)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}, indent=2) + "\n"
    )


def new_pair_folders(out: Path) -> TinyPair:
    """``out/target`` and ``out/assistant`` to write into; never into folders that hold files."""
    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    for folder in (pair.target, pair.assistant):
        if folder.exists() and any(folder.iterdir()):
            raise FileExistsError(f"{folder} already holds files; choose an empty folder")
    out.mkdir(parents=True, exist_ok=True)
    return pair


def build_tiny_pair(
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
        train_tokenizer(tok_dir)
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
