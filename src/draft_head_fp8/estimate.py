"""What the FP8 draft head should buy on a given pair and device, before spending GPU time.

A memory-bound model of one decode step, from configs and safetensors headers alone (no weights
are read): every byte a step must read, divided by the memory bandwidth. At small batch a decode
step is a read of the weights, so this is the floor the hardware can reach, and the FP8 head's
gain is its share of those bytes.

One decode step with N speculative tokens at batch B:
- the target verifies B x (N + 1) tokens: it reads every language-model weight once, except what
  is gathered by token (the input embedding of an untied model, per-layer input embeddings), and
  of each MoE layer only the experts those tokens are routed to (expected distinct experts under
  uniform routing: E x (1 - (1 - k/E)^tokens));
- the draft runs N times at batch B: its body (everything but its embedding, which after the share
  is the target's and is only gathered; MTP layers shipped inside the target's checkpoint count
  here, not in the target; of an MoE draft layer, the experts B tokens touch) and its head:
  rows x hidden x 2 bytes in BF16, x 1 in FP8 (+ a 4-byte scale), + B x k x hidden x 2 for
  exact rescoring of k candidates. Which head, from the family record (``Family.head_in``): the
  target's (its vocabulary x hidden), or a head tensor of the drafter's own (EAGLE-3's
  ``lm_head``, over ``draft_vocab_size`` rows), then counted as the head and not also as body.
  EAGLE-3's id maps: ``d2t`` (int64, one per draft-vocabulary row) is body, since vLLM's
  ``compute_logits`` reads it whole on every draft token; ``t2d`` is never loaded by vLLM.
Vision and audio towers are not read while decoding text. Weights are served in BF16 (vLLM casts
F32/F16 on load); quantized checkpoint tensors count at their stored size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from draft_head_fp8 import families
from draft_head_fp8.checkpoint import CheckpointError, read_config, read_header, safetensors_files
from draft_head_fp8.families.family import TARGET

H200_GBPS = 4800.0
# Bytes per element as served: floating tensors are cast to BF16, others keep their size.
_SERVED_BYTES = {"F32": 2, "F16": 2, "BF16": 2, "F64": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1,
                 "U8": 1, "I16": 2, "I32": 4, "I64": 8, "BOOL": 1}  # fmt: skip
# Qwen-VL-style checkpoints (Qwen3.5, Qwen3-VL) name their tower ``model.visual.*``.
_NOT_DECODE = ("vision", "visual", "audio", "embed_vision", "embed_audio", "multi_modal")
# EAGLE-3's target -> draft id mask: vLLM's loader skips any tensor so named, so nothing reads it.
_NOT_LOADED = "t2d"


class EstimateError(ValueError):
    """The configs or headers lack what the estimate needs; the message says what."""


@dataclass
class Weights:
    """A checkpoint's tensors by role: name -> bytes as served."""

    dense: dict[str, int] = field(default_factory=dict)  # read once per forward
    experts: dict[str, int] = field(default_factory=dict)  # [E, ...]: read per routed expert
    embedding: dict[str, int] = field(default_factory=dict)  # token embedding table(s)
    gathered: dict[str, int] = field(default_factory=dict)  # per-layer inputs: rows by token
    skipped: dict[str, int] = field(default_factory=dict)  # towers not used to decode text


def _served_bytes(entry: dict, name: str) -> int:
    dtype = entry.get("dtype")
    if dtype not in _SERVED_BYTES:
        raise EstimateError(f"tensor {name} has dtype {dtype!r}, which this estimate cannot size")
    count = 1
    for dim in entry.get("shape") or []:
        count *= int(dim)
    return count * _SERVED_BYTES[dtype]


def read_weights(model_dir: str | os.PathLike) -> Weights:
    """Every tensor of a checkpoint, classified, from its safetensors headers."""
    files = safetensors_files(model_dir)
    if not files:
        raise EstimateError(f"{model_dir}: no .safetensors files to size the weights from")
    weights = Weights()
    for path in files:
        if not path.exists():
            raise EstimateError(f"{path}: listed in the index but missing (download incomplete?)")
        try:
            header, _ = read_header(path)
        except (OSError, CheckpointError) as exc:
            raise EstimateError(f"{path}: cannot read its safetensors header ({exc})") from None
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            size = _served_bytes(entry, name)
            if any(part in name for part in _NOT_DECODE) or name.split(".")[-1] == _NOT_LOADED:
                weights.skipped[name] = size
            elif name.endswith("shared_head.head.weight"):
                # An MTP layer's copy of the target's head: vLLM replaces it by the target's
                # head at the share, so it is read as the draft head, counted there.
                weights.skipped[name] = size
            elif "embed_tokens_per_layer" in name:
                weights.gathered[name] = size
            elif name.endswith("embed_tokens.weight"):
                weights.embedding[name] = size
            elif ".experts." in name:
                weights.experts[name] = size
            else:
                weights.dense[name] = size
    return weights


def _text(config: dict) -> dict:
    return config.get("text_config") or config


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens touch in one layer, routed uniformly at random."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass
class StepBytes:
    target: float
    draft_body: float
    draft_head_bf16: float
    draft_head_fp8: float
    notes: list[str]

    @property
    def bf16(self) -> float:
        return self.target + self.draft_body + self.draft_head_bf16

    @property
    def fp8(self) -> float:
        return self.target + self.draft_body + self.draft_head_fp8


def _first(text: dict, names: tuple[str, ...]) -> object:
    return next((text[n] for n in names if text.get(n) is not None), None)


def routed_bytes(config: dict, weights: Weights, tokens: int, who: str) -> tuple[float, str]:
    """The expert bytes ``tokens`` tokens read, and a note saying so."""
    text = _text(config)
    # Model configs name these fields two ways; either serves.
    experts = _first(text, ("num_experts", "n_routed_experts"))
    top_k = _first(text, ("top_k_experts", "num_experts_per_tok"))
    if not isinstance(experts, int) or not isinstance(top_k, int) or experts <= 0:
        raise EstimateError(
            f"the {who} has expert weights but its config lacks the expert count (num_experts "
            "or n_routed_experts) or the top-k (top_k_experts or num_experts_per_tok)"
        )
    touched = min(float(experts), expected_experts(experts, top_k, tokens))
    note = (
        f"MoE {who}: {touched:.1f} of {experts} experts per layer touched by {tokens} "
        f"token(s) (top-{top_k}, uniform routing)"
    )
    return sum(weights.experts.values()) * touched / experts, note


def target_step_bytes(config: dict, weights: Weights, tokens: int) -> tuple[float, list[str]]:
    text = _text(config)
    notes = []
    total = float(sum(weights.dense.values()))
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
    if tied:
        total += sum(weights.embedding.values())  # the tied head reads the whole table
    if weights.experts:
        routed, note = routed_bytes(config, weights, tokens, "target")
        total += routed
        notes.append(note)
    return total, notes


def split_draft(weights: Weights, prefixes: tuple[str, ...]) -> tuple[Weights, Weights]:
    """(target, draft) of a checkpoint that holds both, the draft's tensors by name prefix."""
    target, draft = Weights(), Weights()
    for role in ("dense", "experts", "embedding", "gathered", "skipped"):
        for name, size in getattr(weights, role).items():
            side = draft if name.startswith(prefixes) else target
            getattr(side, role)[name] = size
    return target, draft


@dataclass(frozen=True)
class HeadShape:
    """The head one draft token reads: rows x hidden, and the draft checkpoint's tensor that is
    that head where it is a tensor of the drafter's own (read as the head, not as body)."""

    rows: int
    hidden: int
    own_tensor: str | None = None


def head_shape(
    target_config: dict, assistant_config: dict, assistant_dir: str | os.PathLike
) -> HeadShape:
    """Which head a draft token reads, from the family record: the target's, or the drafter's
    own (its own vocabulary where it has one); without a record, the draft config's."""
    draft_text = _text(assistant_config)
    hidden, vocab = draft_text.get("hidden_size"), draft_text.get("vocab_size")
    missing = [n for n, v in (("hidden_size", hidden), ("vocab_size", vocab)) if not v]
    if missing:
        raise EstimateError(f"{assistant_dir}: config lacks {' and '.join(missing)}")
    family = families.for_config(assistant_config, Path(assistant_dir))
    head = family.head_in(assistant_dir) if family is not None else None
    if head is None or head.tied_to_draft_embedding:
        return HeadShape(vocab, hidden)
    if head.folder == TARGET:
        text = _text(target_config)
        return HeadShape(text.get("vocab_size") or vocab, text.get("hidden_size") or hidden)
    # A head tensor of the drafter's own: vLLM sizes it draft_vocab_size rows, else vocab_size.
    rows = draft_text.get("draft_vocab_size") or assistant_config.get("draft_vocab_size") or vocab
    return HeadShape(rows, hidden, head.tensor)


def _own_head_out_of_body(draft: Weights, head: HeadShape, assistant_dir: object) -> None:
    """Take the drafter's own head tensor out of its body: it is read once, as the head."""
    size = draft.dense.pop(head.own_tensor, None) if head.own_tensor else None
    if size is not None and size != head.rows * head.hidden * 2:
        raise EstimateError(
            f"{assistant_dir}: {head.own_tensor} holds {size} bytes as served, but the config "
            f"says {head.rows} x {head.hidden} (draft_vocab_size or vocab_size x hidden_size)"
        )


def step_bytes(
    target_dir: str | os.PathLike,
    assistant_dir: str | os.PathLike,
    *,
    speculative_tokens: int,
    batch: int,
    rescore_k: int,
) -> StepBytes:
    target_config, assistant_config = read_config(target_dir), read_config(assistant_dir)
    head = head_shape(target_config, assistant_config, assistant_dir)
    family = families.for_config(assistant_config, Path(assistant_dir))
    target_weights = read_weights(target_dir)
    if family is not None and family.draft_prefixes is not None:
        # MTP layers ship inside the target's checkpoint: theirs is the draft's body.
        prefixes = family.draft_prefixes(target_config)
        target_weights, draft = split_draft(target_weights, prefixes)
    else:
        draft = read_weights(assistant_dir)
    _own_head_out_of_body(draft, head, assistant_dir)
    target, notes = target_step_bytes(
        target_config, target_weights, batch * (speculative_tokens + 1)
    )
    body = float(sum(draft.dense.values()))
    if draft.experts:
        routed, note = routed_bytes(assistant_config, draft, batch, "draft")
        body += routed
        notes.append(note)
    head_bf16 = head.hidden * head.rows * 2
    head_fp8 = head.hidden * head.rows + 4 + batch * rescore_k * head.hidden * 2
    n = speculative_tokens
    return StepBytes(target, n * body, n * head_bf16, n * head_fp8, notes)


def bytes_read(step: StepBytes) -> dict[str, float]:
    """The step's byte counts by part, as ``check --estimate --json`` and the bench report them."""
    return {
        "target": step.target,
        "draft_body": step.draft_body,
        "draft_head_bf16": step.draft_head_bf16,
        "draft_head_fp8": step.draft_head_fp8,
        "step_bf16": step.bf16,
        "step_fp8": step.fp8,
    }


def speedup(step: StepBytes) -> float:
    """Relative gain of a step with the FP8 head at equal acceptance (0.01 = 1 % faster)."""
    return step.bf16 / step.fp8 - 1.0


def break_even_loss(step: StepBytes) -> float:
    """The fraction of tokens per step an acceptance loss may cost before FP8 is slower."""
    return 1.0 - step.fp8 / step.bf16


def with_loss(step: StepBytes, loss: float) -> float:
    """Net gain when the FP8 head also lowers tokens per step by ``loss`` (0.03 = 3 %)."""
    return (1.0 + speedup(step)) * (1.0 - loss) - 1.0


def seconds(total_bytes: float, bandwidth_gbps: float) -> float:
    return total_bytes / (bandwidth_gbps * 1e9)
