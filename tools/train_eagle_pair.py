"""Train the tiny Llama target + EAGLE-1 draft pair that ships in
``draft_head_fp8/data/tiny_eagle1_pair`` (family ``llama-eagle1``).

Why this family gets a trained pair: for the families whose drafter reads the target's own
``lm_head`` (MTP and EAGLE-1), "vLLM's counters identical with the flag off and on" means little
with random weights, which accept almost no drafts. One trained pair of such a family is enough,
and Llama EAGLE-1 is the one: its target is a plain ``LlamaForCausalLM`` that transformers trains
natively; its drafter is a separate folder, so the target stays a standard checkpoint; and
``EagleProposer`` is the proposer every MTP family also runs through in vLLM V1.

    python -m tools.train_eagle_pair OUT [--minutes N] [--seed S]

writes ``OUT/target`` (``LlamaForCausalLM``, the shapes of ``tiny.llama_eagle1.config(2)``, head
untied), ``OUT/assistant`` (the EAGLE-1 draft, written by ``tiny.llama_eagle1.save_draft``:
``layers.0.*`` without the input norm and ``fc.weight``, no embedding, no head) and
``OUT/training.json``. Everything but the models is ``tools/train_tiny_pair.py``'s, shared through
its ``Recipe``: the corpus (stdlib docstrings, one file in ten held out), the tokenizer (the one
``tiny.train_tokenizer`` trains at vocabulary 2048: byte for byte the Gemma pair's and the random
builder's), the target's next-token cross-entropy, the self-distillation rows, the distillation
loop (KL(target at ``i + k`` || draft step ``k``), ``k = 1..3`` unrolled, teacher-forced) and the
record. Deterministic: seeded, fixed step counts, one thread.

The draft is computed exactly as vLLM's EAGLE proposer computes it (``tools/eagle_replay.py``
says what that is and where it was read): ``fc(cat(E_target(t[i+1]), h_i))`` at position ``i``,
``h_i`` the target's final-normed hidden state; one decoder layer without input norm, no final
norm; the target's ``lm_head`` on its output; later steps take the draft's own output and token at
the next position, attending to the first-pass K/V of ``0..i`` and their own. The draft is
evaluated as vLLM will load it: the saved bf16 files, read back.
"""

from __future__ import annotations

import sys
from pathlib import Path

from draft_head_fp8.tiny.common import TinyPair, save_model
from draft_head_fp8.tiny.llama_eagle1 import VOCAB, config, save_draft
from tools import eagle_replay, train_tiny_pair
from tools.train_tiny_pair import Recipe


def _models(data):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config(2)).float(), eagle_replay.new_draft()


def _save(target, draft, tok_dir: Path, pair: TinyPair) -> None:
    save_model(target, tok_dir, pair.target)
    save_draft(eagle_replay.as_llama(draft), draft["fc"].weight, tok_dir, pair.assistant)


def _read_back(target, draft, pair: TinyPair):
    return eagle_replay.load_pair(pair)


LLAMA_EAGLE1 = Recipe(
    prog="python -m tools.train_eagle_pair",
    description="Train the tiny Llama target + EAGLE-1 draft pair on stdlib docstrings "
    "(CPU, minutes).",
    vocab=VOCAB,
    new_models=_models,
    save=_save,
    evaluated=_read_back,
    replay=eagle_replay,
    record={
        "family": "llama-eagle1",
        "draft": "EAGLE-1 as vLLM computes it (tools/eagle_replay.py): fc(cat(E_target(t[i+1]), "
        "h_i)) at position i, h_i the target's final-normed hidden state; one decoder layer "
        "without input norm, no final norm; the target's lm_head on its output; step k at "
        "position i+k-1 from the previous step's output and token, attending to first-pass K/V "
        "0..i and its own",
    },
)


def main(argv: list[str] | None = None) -> int:
    return train_tiny_pair.main(argv, recipe=LLAMA_EAGLE1)


if __name__ == "__main__":
    sys.exit(main())
