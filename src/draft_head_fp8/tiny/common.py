"""What every family's tiny checkpoint builder shares: fresh folders, the tokenizer, saving a
transformers model in bf16, and rewriting its one safetensors file and config.json.

Builders save a real transformers model (so names and shapes are the ones transformers writes),
then move or add the drafter's tensors under the names the vLLM model file's ``load_weights``
reads. The tokenizer is a byte-level BPE trained here on text that ships with Python (the
docstrings of the standard library), so nothing comes from the network.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
SPECIAL_IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class TinyPair:
    """A target and its drafter's folders; the same folder when the drafter (MTP) ships inside
    the target's checkpoint."""

    target: Path
    assistant: Path


def empty_folder(path: Path) -> Path:
    """``path`` ready to write into; never a folder that already holds files."""
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} already holds files; choose an empty folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def new_pair(out: Path, *, seed: int, vocab: int) -> Iterator[tuple[TinyPair, Path]]:
    """A target's and its drafter's empty folders under ``out`` (refuses folders with files),
    torch seeded with ``seed``, and the folder of a ``vocab``-token tokenizer trained here for
    both, a scratch folder gone when the block ends."""
    import torch

    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    for folder in (pair.target, pair.assistant):
        empty_folder(folder)
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tokenizer = Path(scratch) / "tokenizer"
        train_tokenizer(tokenizer, vocab)
        yield pair, tokenizer


def stdlib_files() -> list[Path]:
    """The standard library's top-level ``.py`` files, sorted: text that ships with Python."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def docstrings(path: Path) -> list[tuple[str | None, str]]:
    """(name, docstring) of a source file's module, classes and functions, in ``ast.walk``
    order, read from source (nothing is imported); the module's name is None."""
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


def train_tokenizer(out: Path, vocab_size: int) -> None:
    """A byte-level BPE of exactly ``vocab_size`` tokens into ``out`` (a few seconds)."""
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
    if tok.get_vocab_size() != vocab_size:
        # vLLM sizes the head from config.vocab_size; a shorter tokenizer would still run but
        # leave head rows no token can reach, which hides indexing mistakes.
        raise RuntimeError(f"tokenizer reached {tok.get_vocab_size()} tokens, not {vocab_size}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
        unk_token="<unk>",
    )  # fmt: skip
    fast.save_pretrained(out)


def save_model(model: Any, tokenizer_dir: Path | None, out: Path) -> None:
    """bf16 safetensors, the tokenizer (copied from ``tokenizer_dir``, else trained for the
    model's vocabulary) and a generation config."""
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
    if tokenizer_dir is None:
        train_tokenizer(out, model.config.vocab_size)
    else:
        for name in os.listdir(tokenizer_dir):
            shutil.copy2(tokenizer_dir / name, out / name)
    (out / "generation_config.json").write_text(
        json.dumps(SPECIAL_IDS, indent=2, sort_keys=True) + "\n"
    )


def copy_tokenizer(source: Path, out: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy2(source / name, out / name)


def rewrite_weights(folder: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Load ``folder``'s one safetensors file, edit its tensors, write it back whole."""
    from safetensors.torch import load_file, save_file

    tensors = edit(load_file(folder / WEIGHTS))
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    save_file(contiguous, folder / WEIGHTS, metadata={"format": "pt"})


def update_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def move_layer(tensors: dict[str, Any], source: str, dest: str) -> dict[str, Any]:
    """Rename every tensor under prefix ``source`` to prefix ``dest`` (both end with a dot)."""
    return {
        dest + name[len(source) :] if name.startswith(source) else name: tensor
        for name, tensor in tensors.items()
    }


class Randoms:
    """Seeded bf16 tensors for the weights a transformers model does not have (MTP glue)."""

    def __init__(self, seed: int) -> None:
        import torch

        self.gen = torch.Generator().manual_seed(seed + 1)

    def normal(self, *shape: int, std: float = 0.02) -> Any:
        import torch

        return (torch.randn(*shape, generator=self.gen) * std).to(torch.bfloat16)

    @staticmethod
    def ones(n: int) -> Any:
        import torch

        return torch.ones(n, dtype=torch.bfloat16)

    @staticmethod
    def zeros(n: int) -> Any:
        import torch

        return torch.zeros(n, dtype=torch.bfloat16)


def deepseek_style_mtp_glue(seed: int, layer: int, hidden: int, *, tied: bool):
    """An edit for ``rewrite_weights``: the glue DeepSeek-style checkpoints (DeepSeek-V3, GLM-4.5)
    keep beside the MTP layer's decoder block ``model.layers.{layer}``: ``enorm``, ``hnorm``,
    ``eh_proj`` and ``shared_head.norm``, and copies of the target's embedding and head as
    ``embed_tokens`` and ``shared_head.head`` (vLLM replaces the head copy by the target's)."""
    rand = Randoms(seed)

    def edit(tensors: dict) -> dict:
        mtp = f"model.layers.{layer}."
        embed = tensors["model.embed_tokens.weight"]
        head = embed if tied else tensors["lm_head.weight"]
        tensors[f"{mtp}enorm.weight"] = rand.ones(hidden)
        tensors[f"{mtp}hnorm.weight"] = rand.ones(hidden)
        tensors[f"{mtp}eh_proj.weight"] = rand.normal(hidden, 2 * hidden)
        tensors[f"{mtp}shared_head.norm.weight"] = rand.ones(hidden)
        tensors[f"{mtp}shared_head.head.weight"] = head.clone()
        tensors[f"{mtp}embed_tokens.weight"] = embed.clone()
        return tensors

    return edit


def mtp_glue(
    seed: int,
    *,
    moves: Sequence[tuple[str, str]],
    norms: Sequence[str],
    projection: str,
    hidden: int,
):
    """An edit for ``build_mtp_target``: the extra decoder layer a target was saved with becomes
    its MTP layer where the drafter's class loads it (each ``(source, dest)`` prefix in
    ``moves``, in order), beside the glue MTP drafters keep: RMS norms (``norms``, ones) and
    the ``[hidden, 2 * hidden]`` projection joining a token's embedding with the hidden state
    (``projection``); names without ``.weight``."""
    rand = Randoms(seed)

    def edit(tensors: dict) -> dict:
        for source, dest in moves:
            tensors = move_layer(tensors, source, dest)
        for norm in norms:
            tensors[f"{norm}.weight"] = rand.ones(hidden)
        tensors[f"{projection}.weight"] = rand.normal(hidden, 2 * hidden)
        return tensors

    return edit


# What every target-head family's tiny config shares: small, the tokenizer's special ids, and
# room for compare's default max-model-len (1024).
# The smallest vision tower the vision-language targets' configs build (one block): the MTP tests
# run their language model only, so the tower's size is only what its config must hold.
SMALL_VISION = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2)

SMALL_TEXT = dict(
    vocab_size=2048,
    hidden_size=128,
    intermediate_size=256,
    max_position_embeddings=2048,
    **SPECIAL_IDS,
)

# The MoE of DeepSeek-style targets (DeepSeek-V3, GLM-4.5), at its smallest: a dense first layer,
# then four routed experts (top-2) and a shared one, in one group.
DEEPSEEK_STYLE_MOE = dict(
    moe_intermediate_size=64,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=1.0,
    norm_topk_prob=True,
)


def build_mtp_target(
    out: str | os.PathLike,
    model: Any,
    edit: Callable[[dict[str, Any]], dict[str, Any]],
    **config_changes: Any,
) -> TinyPair:
    """A target checkpoint whose MTP layers ship inside it, in ``out/target``: ``model`` (a
    transformers model) saved with a tokenizer, its tensors edited into the MTP layout, its
    config told of them. Refuses a folder with files."""
    out = Path(out)
    target = empty_folder(out / "target")
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        train_tokenizer(tok_dir, model.config.vocab_size)
        save_model(model, tok_dir, target)
    rewrite_weights(target, edit)
    update_config(target, **config_changes)
    return TinyPair(target=target, assistant=target)
