"""The BF16 rows serve through vLLM's own unquantized head path (vllm_plugin/batch_paths.py): the
holder is a ``ParallelLMHead`` prepared by vLLM's ``UnquantizedEmbeddingMethod``, so it gets what
the installed vLLM gives a stock head (on a CPU the prepared oneDNN GEMM; on CUDA with vLLM 0.34
the skinny GEMM, which needs a GPU and is not run here), and its logits are the stock head's."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    UnquantizedEmbeddingMethod,
)

from draft_head_fp8.vllm_plugin.batch_paths import BF16Head, head_holder


def _rows(vocab=256, hidden=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(vocab, hidden, generator=gen) * 0.05).bfloat16()


def test_the_holder_is_a_parallel_lm_head_holding_exactly_the_rows():
    rows = _rows()
    holder = head_holder(rows)
    assert isinstance(holder, ParallelLMHead)
    assert holder.weight.data_ptr() == rows.data_ptr()  # the rows themselves, never a copy
    assert getattr(holder, "bias", None) is None
    assert [name for name, _ in holder.named_parameters()] == ["weight"]


def test_bf16_rows_give_the_stock_heads_logits_bit_for_bit():
    rows = _rows()
    x = torch.randn(5, rows.shape[1], generator=torch.Generator().manual_seed(1)).bfloat16()
    ours = BF16Head(rows)(x)
    # The stock head, as vLLM prepares and applies one: its own method on its own holder.
    stock = head_holder(rows.clone())
    method = UnquantizedEmbeddingMethod()
    method.process_weights_after_loading(stock)
    assert torch.equal(ours, method.apply(stock, x))
    assert torch.allclose(ours.float(), (x.float() @ rows.float().t()), atol=2e-2, rtol=2e-2)


def test_the_cpu_measures_and_serves_through_that_head():
    from draft_head_fp8.vllm_plugin.batch_paths import MEASURED_ROWS, choose

    rows = _rows()
    threshold, head, record = choose(
        1,  # BF16 from one row: the BF16 head must be built and kept
        device=torch.device("cpu"),
        fp8=lambda x: x.float() @ rows.float().t(),
        bf16=lambda: BF16Head(rows),
        hidden=rows.shape[1],
        dtype=rows.dtype,
    )
    assert threshold == 1 and isinstance(head.layer, ParallelLMHead)
    assert [m["rows"] for m in record["measured"]] == list(MEASURED_ROWS)
