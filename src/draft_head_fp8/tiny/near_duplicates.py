"""A head with near-duplicate rows, the case the certified pick exists for: rows closer than the
FP8 step put more than k tokens within the FP8 error of the best one, and the plain top-k
rescoring then picks by chance. Made from a shipped trained pair (so drafts are accepted and
equal counters mean something): the target's head gets, for each of a few tokens the target
itself generates most, ``copies`` rows of that token's row times (1 + ``noise`` N(0, 1)),
written over rows of tokens it never generates on ``prompts``."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from draft_head_fp8.tiny.common import TinyPair, rewrite_weights


def frequent_tokens(target: Path, prompts: list[str], *, count: int, tokens: int = 32) -> list:
    """The ``count`` tokens the target generates most (greedy, transformers) on ``prompts``,
    and every token it touches there."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    seen: Counter[int] = Counter()
    touched: set[int] = set()
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=tokens, do_sample=False)
        generated = out[0, ids.shape[1] :].tolist()
        seen.update(generated)
        touched.update(out[0].tolist())
    return [[t for t, _ in seen.most_common(count)], sorted(touched)]


def build(
    pair: TinyPair, out: Path, prompts: list[str], *, clusters: int = 3, copies: int = 23,
    noise: float = 1e-2, seed: int = 0,
) -> tuple[TinyPair, dict]:  # fmt: skip
    """A copy of ``pair`` whose target head holds the clusters; and which rows were written."""
    import torch

    frequent, touched = frequent_tokens(pair.target, prompts, count=clusters)
    shutil.copytree(pair.target, out / "target")
    shutil.copytree(pair.assistant, out / "assistant")
    written: dict[int, list[int]] = {}

    def edit(tensors: dict) -> dict:
        head = tensors["lm_head.weight"]
        free = [r for r in range(head.shape[0] - 1, -1, -1) if r not in touched]
        gen = torch.Generator().manual_seed(seed)
        for n, token in enumerate(frequent):
            rows = free[n * copies : (n + 1) * copies]
            base = head[token].float()
            for row in rows:
                jitter = 1 + noise * torch.randn(base.shape, generator=gen)
                head[row] = (base * jitter).to(head.dtype)
            written[token] = rows
        return tensors

    rewrite_weights(out / "target", edit)
    return TinyPair(target=out / "target", assistant=out / "assistant"), written
