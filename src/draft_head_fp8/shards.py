"""Which rows of the draft head each tensor-parallel rank holds: vLLM's vocab-parallel layout,
as pure arithmetic (no vLLM import), so that configs, receipts and tests can reason about it.

vLLM pads the vocabulary to a multiple of 64 and gives rank r the rows
``[r * padded / tp, (r + 1) * padded / tp)`` of the padded vocabulary; the real tokens of a shard
are that range clipped to the vocabulary, and the rows past them are zero padding at the end of
the shard (``VocabParallelEmbedding._get_indices`` with no added vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


def padded_vocab(vocab: int, padding: int = VOCAB_PADDING) -> int:
    return -(-vocab // padding) * padding


@dataclass(frozen=True)
class Shard:
    """Rank ``rank`` of ``size``: rows ``[start, end)`` of the padded vocabulary, of which
    ``[start, real_end)`` are real tokens (``real_end`` clipped to the vocabulary)."""

    rank: int
    size: int
    padded: int
    start: int
    end: int
    real_start: int
    real_end: int

    @property
    def rows(self) -> int:
        return self.end - self.start

    @property
    def real_rows(self) -> int:
        return self.real_end - self.real_start


def shard(vocab: int, rank: int, size: int, padding: int = VOCAB_PADDING) -> Shard:
    if vocab < 1 or size < 1 or not 0 <= rank < size:
        raise ValueError(f"no shard {rank} of {size} for a vocabulary of {vocab}")
    padded = padded_vocab(vocab, padding)
    if padded % size:
        raise ValueError(f"a padded vocabulary of {padded} rows does not split into {size} ranks")
    rows = padded // size
    start, end = rank * rows, (rank + 1) * rows
    return Shard(rank, size, padded, start, end, min(start, vocab), min(end, vocab))


def tiles(ranges: list[tuple[int, int]], padded: int) -> bool:
    """Do these ``[start, end)`` ranges cover ``[0, padded)`` exactly once, with no gap?"""
    position = 0
    for start, end in sorted(ranges):
        if start != position or end <= start:
            return False
        position = end
    return position == padded and bool(ranges)
