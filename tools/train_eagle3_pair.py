"""Train the tiny Llama target + EAGLE-3 draft pair that ships in
``draft_head_fp8/data/tiny_eagle3_pair`` (family ``llama-eagle3``).

Why: random EAGLE-3 weights accept no drafts, so "vLLM's counters identical with the flag off and
on" counts nothing but rejections. This pair's draft has its own head over a draft vocabulary
(``d2t``), the head the flag quantizes for EAGLE-3, so accepted drafts exercise the exact pick
over the draft vocabulary and vLLM's mapping to target ids after it.

    python -m tools.train_eagle3_pair OUT [--minutes N] [--seed S]

writes ``OUT/target`` (``LlamaForCausalLM`` of ``tiny.llama_eagle3.target_config()``: three
layers, head untied), ``OUT/assistant`` (the EAGLE-3 draft, written by
``tiny.llama_eagle3.write_draft`` with ``draft_config(DRAFT_VOCAB)``: ``midlayer.*``, ``fc``,
``norm``, ``lm_head`` over ``DRAFT_VOCAB`` rows, ``d2t``, ``t2d``, no embedding) and
``OUT/training.json``. Everything but the models is ``tools/train_tiny_pair.py``'s, shared through
its ``Recipe``, as for the EAGLE-1 pair (``tools/train_eagle_pair.py``): the corpus, the tokenizer,
the target's training, the self-distillation rows, the distillation loop (here KL over the draft
vocabulary, ``tools.eagle3_replay.distill_loss``) and the record. Deterministic: seeded, fixed
step counts, one thread.

The draft vocabulary is not ``tiny.llama_eagle3.draft_vocabulary``'s random sample (fine for a
random pair, hopeless for a trained one: the target's next token would mostly lie outside it) but
what EAGLE-3 trainers pick: the special ids and the tokens most frequent in the training text,
sorted so that ``d2t`` keeps vLLM's id order (``vocabulary``).

The draft is computed exactly as vLLM's EAGLE-3 proposer computes it (``tools/eagle3_replay.py``
says what that is and where it was read) and evaluated as vLLM will load it: the saved bf16
files, read back.
"""

from __future__ import annotations

import sys
from pathlib import Path

from draft_head_fp8.tiny.common import SPECIAL_IDS, TinyPair, save_model
from draft_head_fp8.tiny.llama_eagle3 import DRAFT_VOCAB, VOCAB, target_config, write_draft
from tools import eagle3_replay, train_tiny_pair
from tools.train_tiny_pair import Recipe


def vocabulary(train, size: int = DRAFT_VOCAB):
    """The draft vocabulary, sorted target ids: the special ids, then the ``size`` minus those
    tokens most frequent in ``train`` (packed training rows), ties to the lower id."""
    import torch

    special = sorted(set(SPECIAL_IDS.values()))
    counts = torch.bincount(train.flatten(), minlength=VOCAB).double()
    counts[special] = -1.0  # chosen anyway
    order = torch.argsort(-counts, stable=True)
    return torch.sort(torch.cat([torch.tensor(special), order[: size - len(special)]])).values


def _models(data):
    from transformers import LlamaForCausalLM

    target = LlamaForCausalLM(target_config()).float()
    return target, eagle3_replay.new_draft(vocabulary(data.train))


def _save(target, draft, tok_dir: Path, pair: TinyPair) -> None:
    save_model(target, tok_dir, pair.target)
    write_draft(pair.assistant, pair.target, seed=0, draft_vocab=DRAFT_VOCAB, own_head=True,
                tensors=eagle3_replay.draft_tensors(draft))  # fmt: skip


def _read_back(target, draft, pair: TinyPair):
    return eagle3_replay.load_pair(pair)


LLAMA_EAGLE3 = Recipe(
    prog="python -m tools.train_eagle3_pair",
    description="Train the tiny Llama target + EAGLE-3 draft pair on stdlib docstrings "
    "(CPU, minutes).",
    vocab=VOCAB,
    new_models=_models,
    save=_save,
    evaluated=_read_back,
    replay=eagle3_replay,
    record={
        "family": "llama-eagle3",
        "draft": "EAGLE-3 as vLLM computes it (tools/eagle3_replay.py): fc over the target's "
        "auxiliary hidden states (the inputs of its layers 0, 1, 2, joined); one decoder layer "
        "whose attention reads cat(input_layernorm(E_target(t[i+1])), hidden_norm(h)), residual "
        "h; final norm; its own lm_head over the draft vocabulary on the normed output, mapped "
        "to target ids by d2t; step k at position i+k-1 from the previous step's pre-norm output "
        "and token, attending to first-pass K/V 0..i and its own",
        "draft_vocabulary": f"{DRAFT_VOCAB} target ids: the special ids 0, 1, 2 and the "
        "most frequent tokens of the training rows, sorted",
        "distillation_loss": "KL(target || draft) over the draft vocabulary (the target's "
        "distribution restricted to it, renormalised); top-1 agreement against the target's "
        "argmax over its whole vocabulary",
    },
)


def main(argv: list[str] | None = None) -> int:
    return train_tiny_pair.main(argv, recipe=LLAMA_EAGLE3)


if __name__ == "__main__":
    sys.exit(main())
