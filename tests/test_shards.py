"""vLLM's vocab-parallel layout as this package computes it (``shards``), against vLLM's own
``VocabParallelEmbedding._get_indices`` for vocab sizes that do not divide evenly, TP 1/2/4/8."""

from __future__ import annotations

import pytest

from draft_head_fp8.shards import padded_vocab, shard, tiles

VOCABS = [1, 63, 64, 65, 2000, 2048, 2080, 32001, 151936, 262144, 262145]


@pytest.fixture(scope="module")
def vllm_indices():
    module = pytest.importorskip("vllm.model_executor.layers.vocab_parallel_embedding")
    return module.VocabParallelEmbedding._get_indices, module.pad_vocab_size


@pytest.mark.parametrize("size", [1, 2, 4, 8])
@pytest.mark.parametrize("vocab", VOCABS)
def test_shards_are_vllms(vllm_indices, vocab, size):
    get_indices, pad = vllm_indices
    padded = pad(vocab)
    assert padded_vocab(vocab) == padded
    for rank in range(size):
        ours = shard(vocab, rank, size)
        theirs = get_indices(padded, padded, vocab, vocab, rank, size)
        assert (ours.start, ours.end) == (
            theirs.padded_org_vocab_start_index,
            theirs.padded_org_vocab_end_index,
        )
        assert (ours.real_start, ours.real_end) == (
            theirs.org_vocab_start_index,
            theirs.org_vocab_end_index,
        )
        assert ours.rows == padded // size
        assert ours.real_rows == theirs.num_org_elements


@pytest.mark.parametrize("size", [1, 2, 4, 8])
@pytest.mark.parametrize("vocab", VOCABS)
def test_the_ranks_tile_the_padded_vocabulary(vocab, size):
    shards = [shard(vocab, rank, size) for rank in range(size)]
    assert tiles([(s.start, s.end) for s in shards], padded_vocab(vocab))
    assert sum(s.real_rows for s in shards) == vocab


def test_tiling_refuses_gaps_overlaps_and_short_covers():
    assert not tiles([(0, 32), (33, 64)], 64)
    assert not tiles([(0, 40), (32, 64)], 64)
    assert not tiles([(0, 32)], 64)
    assert not tiles([(0, 32), (0, 32), (32, 64)], 64)
    assert not tiles([], 0)
    assert tiles([(32, 64), (0, 32)], 64)


def test_impossible_shards_are_refused():
    for vocab, rank, size in [(0, 0, 1), (64, 2, 2), (64, -1, 2), (64, 0, 0), (64, 0, 3)]:
        with pytest.raises(ValueError):
            shard(vocab, rank, size)
