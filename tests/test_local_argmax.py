"""vLLM's local argmax reduction (``use_local_argmax_reduction``, vLLM 0.34:
``LogitsProcessor.get_top_tokens``) over the exact pick's logits, in torch alone: at TP N each rank
takes the argmax of its own shard's logits (the head's quant method's output, rescored), and the
ranks keep the best (value, global id) pair, the lowest rank on a tie. Because every rank's
rescored candidates carry the BF16 head's own values and every other logit is clamped below them,
the reduction picks the BF16 head's token, ties included (the lowest id, as the gathered argmax
does). The engine run of the same at TP 2 is ``test_eagle3.py``'s."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.rescore import exact_logits, rescore_top_k  # noqa: E402


def vllm_local_argmax(shard_logits: list, starts: list[int]):
    """``LogitsProcessor.get_top_tokens`` after its all-gather: per rank (max value, global id) in
    float32, then the rank of the best value (the first on a tie) and its id."""
    pairs = []
    for logits, start in zip(shard_logits, starts, strict=True):
        values, local = logits.max(dim=-1)
        pairs.append(torch.stack([values.float(), (local + start).float()], dim=-1))
    gathered = torch.stack(pairs, dim=1)  # [batch, ranks, 2]
    best = gathered[:, :, 0].argmax(dim=-1, keepdim=True)
    return gathered[:, :, 1].gather(-1, best).squeeze(-1).to(torch.int64)


def fp8_shard_logits(rows, quantized, start: int, end: int, x, k: int):
    """One rank's logits as the head method serves them: the FP8 rows of its shard, dequantized,
    times the activations, then rescored from its BF16 rows."""
    fp8 = quantized.weight[start:end].float() * quantized.scale
    logits = (x.float() @ fp8.t()).to(torch.bfloat16)
    return rescore_top_k(logits, x, rows[start:end], k=k, valid_rows=end - start)


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_reduction_of_the_exact_picks_is_the_bf16_heads_token(ranks):
    gen = torch.Generator().manual_seed(ranks)
    vocab, hidden, batch = 1024, 64, 256
    rows = (torch.randn(vocab, hidden, generator=gen) * 0.5).to(torch.bfloat16)
    # Near-duplicates across shards, closer than the FP8 step: the scan alone confuses them.
    for i in range(0, 64, 2):
        far = (i * 37 + vocab // 2 + 1) % vocab
        rows[far] = (rows[i].float() * (1 + 1e-3)).to(torch.bfloat16)
    x = torch.randn(batch, hidden, generator=gen).to(torch.bfloat16)
    x[: batch // 2] = rows[: batch // 2].float().mul(3).to(torch.bfloat16)  # aim at those rows
    quantized = quantize_per_tensor(rows)
    bounds = [(r * vocab // ranks, (r + 1) * vocab // ranks) for r in range(ranks)]
    shards = [fp8_shard_logits(rows, quantized, s, e, x, k=8) for s, e in bounds]
    reference = exact_logits(rows, torch.arange(vocab).expand(batch, vocab), x).argmax(-1)
    plain = (x.float() @ (quantized.weight.float() * quantized.scale).t()).argmax(-1)
    assert (plain != reference).any()  # the FP8 scan alone picks other tokens here
    picked = vllm_local_argmax(shards, [s for s, _ in bounds])
    assert torch.equal(picked, reference)
    # And it is what the gathered path (all logits, one argmax) picks.
    assert torch.equal(picked, torch.cat(shards, dim=-1).argmax(-1))


def test_a_tie_across_ranks_goes_to_the_lowest_id_as_the_gathered_argmax_does():
    vocab, hidden = 8, 4
    rows = torch.zeros(vocab, hidden, dtype=torch.bfloat16)
    rows[1] = rows[6] = torch.tensor([1.0, 2.0, 0.5, 0.25], dtype=torch.bfloat16)  # equal rows
    rows[3] = torch.tensor([0.5, 0.5, 0.5, 0.5], dtype=torch.bfloat16)
    x = torch.ones(1, hidden, dtype=torch.bfloat16)
    quantized = quantize_per_tensor(rows)
    shards = [fp8_shard_logits(rows, quantized, s, s + 4, x, k=2) for s in (0, 4)]
    assert vllm_local_argmax(shards, [0, 4]).tolist() == [1]
    assert torch.cat(shards, dim=-1).argmax(-1).tolist() == [1]
