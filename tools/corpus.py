"""The text the tiny pair is trained on and benchmarked with: the docstrings of Python's own
standard library, read from source (nothing is imported), split by file into a training and a
held-out part. Deterministic for a given Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from draft_head_fp8.tiny import docstrings, stdlib_files

SEQ_LEN = 128
HELDOUT_EVERY = 10  # modules whose sorted index % HELDOUT_EVERY == HELDOUT_EVERY - 1 are held out
BOS, EOS, PAD = 2, 1, 0


@dataclass(frozen=True)
class Corpus:
    train: list[str]
    heldout: list[str]
    train_modules: int
    heldout_modules: int


def _file_documents(path: Path) -> list[str]:
    """One document per docstring; a class's or function's is prefixed with its name."""
    return [
        f"{name}: {doc.strip()}" if name else doc.strip()
        for name, doc in docstrings(path)
        if doc.strip()
    ]


def stdlib_docstring_corpus() -> Corpus:
    """The docstrings (module, classes, functions) of the standard library's top-level ``.py``
    files, read from source like ``tiny.tokenizer_corpus`` (nothing is imported), one document
    each, in sorted file order. Files are split, not documents: one file in ``HELDOUT_EVERY`` (by
    sorted name, among files that have docstrings) is held out of all training."""
    train: list[str] = []
    heldout: list[str] = []
    seen_train = seen_heldout = 0
    for path in stdlib_files():
        docs = _file_documents(path)
        if not docs:
            continue
        if (seen_train + seen_heldout) % HELDOUT_EVERY == HELDOUT_EVERY - 1:
            heldout.extend(docs)
            seen_heldout += 1
        else:
            train.extend(docs)
            seen_train += 1
    return Corpus(
        train=train, heldout=heldout, train_modules=seen_train, heldout_modules=seen_heldout
    )


def encode_documents(tokenizer, docs: list[str]) -> list[list[int]]:
    return [tokenizer.encode(doc, add_special_tokens=False) for doc in docs]


def pack(token_docs: list[list[int]], seq_len: int = SEQ_LEN):
    """``<bos> doc <eos>`` streams packed into ``[N, seq_len]`` rows (the tail is dropped)."""
    import torch

    stream: list[int] = []
    for ids in token_docs:
        stream.append(BOS)
        stream.extend(ids)
        stream.append(EOS)
    rows = len(stream) // seq_len
    return torch.tensor(stream[: rows * seq_len], dtype=torch.long).view(rows, seq_len)


def heldout_prompts(
    tokenizer, corpus: Corpus, *, count: int, prompt_tokens: int, min_doc_tokens: int = 0
):
    """Deterministic benchmark prompts: ``<bos>`` + the first ``prompt_tokens`` tokens of held-out
    documents, spread evenly over the held-out set."""
    docs = [d for d in corpus.heldout]
    encoded = [(d, tokenizer.encode(d, add_special_tokens=False)) for d in docs]
    long_enough = [(d, ids) for d, ids in encoded if len(ids) >= max(prompt_tokens, min_doc_tokens)]
    if not long_enough:
        raise ValueError("no held-out document is long enough for a prompt")
    stride = max(1, len(long_enough) // count)
    picked = long_enough[::stride][:count]
    return [[BOS] + ids[:prompt_tokens] for _, ids in picked]
