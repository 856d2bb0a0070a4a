"""Preflight: would the flag quantize this assistant's head? A prediction from the configs alone
(no weights, no vLLM import), through the same policy the engine runs.

What the configs cannot show is named, not guessed: the engine still decides, and the post-share
receipt still proves, at every start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace

from draft_head_fp8.checkpoint import CheckpointError, read_config
from draft_head_fp8.policy import EXPECTED_ONLINE_SPEC, Eligibility, eligibility
from draft_head_fp8.shards import VOCAB_PADDING, padded_vocab

ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_mtp")
TARGET_TYPES = ("gemma4", "gemma4_text")


class _PlannedParallelLMHead:
    """Stands for the head vLLM's Gemma4MTP always builds (``ParallelLMHead`` at ``lm_head``);
    named and placed as vLLM names it so the policy's class test reads it without vLLM."""


_PlannedParallelLMHead.__name__ = "ParallelLMHead"
_PlannedParallelLMHead.__qualname__ = "ParallelLMHead"
_PlannedParallelLMHead.__module__ = "vllm.model_executor.layers.vocab_parallel_embedding"


@dataclass
class CheckResult:
    assistant: dict
    target: dict | None
    decision: Eligibility
    # Checks the post-share receipt will make that the configs already say will fail.
    receipt_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def eligible(self) -> bool:
        return self.decision.eligible and not self.receipt_problems

    @property
    def reason(self) -> str:
        return (
            self.decision.reason
            if not self.decision.eligible
            else "; ".join(self.receipt_problems) or "eligible"
        )


def _text_config(config: dict) -> dict:
    return config.get("text_config") or config


def _dtype(config: dict) -> str | None:
    value = config.get("dtype") or config.get("torch_dtype") or _text_config(config).get("dtype")
    return None if value is None else str(value).removeprefix("torch.")


def _describe(path: str | os.PathLike, config: dict) -> dict:
    text = _text_config(config)
    return {
        "path": str(path),
        "model_type": config.get("model_type"),
        "hidden_size": text.get("hidden_size"),
        "vocab_size": text.get("vocab_size"),
        "dtype": _dtype(config),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
        "use_ordered_embeddings": bool(config.get("use_ordered_embeddings", False)),
        "backbone_hidden_size": config.get("backbone_hidden_size"),
    }


def _gemma4(path: str | os.PathLike, types: tuple[str, ...], what: str) -> dict:
    config = read_config(path)
    if config.get("model_type") not in types:
        raise CheckpointError(
            f"{path}: model_type {config.get('model_type')!r} is not a {what} "
            f"({' or '.join(types)}); draft-head-fp8 serves only those"
        )
    return _describe(path, config)


def check_assistant(
    assistant_dir: str | os.PathLike, target_dir: str | os.PathLike | None = None
) -> CheckResult:
    """Raises ``CheckpointError`` for a folder that is missing, unreadable or not Gemma 4."""
    assistant = _gemma4(assistant_dir, ASSISTANT_TYPES, "Gemma 4 MTP assistant")
    target = None if target_dir is None else _gemma4(target_dir, TARGET_TYPES, "Gemma 4 target")

    decision = eligibility(
        layer=None,
        # The scheme the plugin always asks for: vLLM's fp8_per_tensor shorthand.
        quant_config=SimpleNamespace(args=SimpleNamespace(linear=EXPECTED_ONLINE_SPEC)),
        role="draft",
        prefix="lm_head",
        enabled=True,  # the question is what the flag would do
        ordered_embeddings=assistant["use_ordered_embeddings"],
        tie_word_embeddings=assistant["tie_word_embeddings"],
        # vLLM builds the draft in the serving dtype, which follows the target's config.
        head_dtype=assistant["dtype"],
        model_dtype=target["dtype"] if target else None,
        parallel_lm_head_class=_PlannedParallelLMHead,
    )
    result = CheckResult(assistant=assistant, target=target, decision=decision)
    serving_dtype = (target or assistant)["dtype"]
    if serving_dtype is not None and serving_dtype != "bfloat16":
        result.receipt_problems.append(
            f"serving dtype {serving_dtype} is not bfloat16: the receipt requires BF16 embeddings "
            "and a BF16 target head (run with --dtype bfloat16)"
        )
    vocab = assistant["vocab_size"]
    if isinstance(vocab, int) and vocab % VOCAB_PADDING:
        result.notes.append(
            f"vocab {vocab} is padded by vLLM to {padded_vocab(vocab)} rows: the receipt will be "
            "v3, which proves the padding (v2 cannot describe it)"
        )
    if target is not None:
        if assistant["backbone_hidden_size"] not in (None, target["hidden_size"]):
            result.notes.append(
                f"assistant backbone_hidden_size {assistant['backbone_hidden_size']} != target "
                f"hidden_size {target['hidden_size']}: this assistant was not made for this target"
            )
        if target["vocab_size"] != vocab:
            result.notes.append(f"vocab differs: assistant {vocab}, target {target['vocab_size']}")
    if not target:
        result.notes.append(
            "no --target given: the serving dtype is taken from the assistant's config"
        )
    if isinstance(vocab, int) and vocab > 0:
        sizes = [n for n in (1, 2, 4, 8) if padded_vocab(vocab) % n == 0]
        result.notes.append(
            f"tensor parallel: any size that splits the padded vocabulary ({padded_vocab(vocab)} "
            f"rows) evenly, e.g. {', '.join(map(str, sizes))}; each rank proves its own shard "
            "with a v3 receipt and the ranks check each other before serving"
        )
    result.notes.append(
        "pipeline parallelism is refused: vLLM skips the embedding share, so there is no proof"
    )
    return result


def head_bytes(result: CheckResult) -> tuple[int, int] | None:
    """Bytes of the draft head per read, BF16 and FP8 (plus its 4-byte scale)."""
    hidden, vocab = result.assistant["hidden_size"], result.assistant["vocab_size"]
    if not (isinstance(hidden, int) and isinstance(vocab, int)):
        return None
    return hidden * vocab * 2, hidden * vocab + 4


__all__ = ["CheckResult", "CheckpointError", "check_assistant", "head_bytes"]
