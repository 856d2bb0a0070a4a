"""Train the tiny Gemma 4 target + MTP assistant pair that ships in
``draft_head_fp8/data/tiny_pair``.

Random weights accept no draft tokens, so acceptance evidence needs a pair that was trained. This
module trains one on CPU in a few minutes, deterministically (seeded, fixed step counts), from
text that ships with Python itself: the docstrings of the standard library, read from its source.
Bitwise reproducible for a fixed Python (its stdlib is the corpus), torch version and thread count.

    python -m tools.train_tiny_pair OUT [--minutes N] [--seed S]

writes ``OUT/target`` and ``OUT/assistant`` (bf16 safetensors + config + the same byte-level BPE
tokenizer ``draft_head_fp8.tiny.gemma4`` trains, saved exactly as ``tiny.save_model`` saves it) and
``OUT/training.json`` (what was done: corpus, split, steps, losses, an offline acceptance check).
What is particular to a family (models, how they are saved, the draft replay) is a ``Recipe``:
``GEMMA4`` here; ``tools/train_eagle_pair.py`` trains the Llama EAGLE-1 pair with the rest of this
module.

What is trained, and why it matches what vLLM runs
--------------------------------------------------
1. **Target** (``Gemma4ForCausalLM``, the shapes of ``tiny.gemma4.target_config()``): plain
   next-token cross-entropy on packed ``<bos> doc <eos>`` sequences of stdlib docstrings. The
   docstrings of one stdlib file in ten are held out (never trained on by either model) and give
   the benchmark prompts.
2. **Assistant** (``Gemma4AssistantForCausalLM``, the shapes of ``tiny.gemma4.assistant_config()``):
   distilled from the frozen target, unrolled over ``DRAFT_STEPS`` draft steps, computing exactly
   what vLLM's Gemma 4 MTP proposer computes (``vllm/v1/spec_decode/gemma4.py`` +
   ``model_executor/models/gemma4_mtp.py``):

   - the query for the draft that follows target position ``i`` sits at position ``i`` (vLLM's
     ``constant_draft_positions``: every draft step of one proposal reuses that position);
   - its input is ``pre_projection(cat(E_target(x) * sqrt(backbone_hidden), h))``: ``E_target`` is
     the *target's* token embedding (the proposer shares it with the draft), ``x`` the token after
     ``i`` (step 1: the target's own token ``t[i+1]``; step ``k``: the token of step ``k-1``,
     teacher-forced to ``t[i+k]`` in training), ``h`` the target's final-normed hidden state at
     ``i`` (step 1) or the previous draft step's ``post_projection`` output (steps 2+);
   - every draft layer is KV-shared: it attends to the K/V the *target's* last layer of the same
     type (sliding / full) wrote for positions ``0..i`` (causal, inclusive; sliding: the last
     ``sliding_window`` of them); no draft K/V exists;
   - logits are the draft's own ``lm_head`` (tied to its draft-dim embedding) on the final-normed
     draft hidden state;
   - the label of step ``k`` is the target's distribution at position ``i+k`` (KL(target || draft)),
     i.e. what the target will say after the token the draft was given: with greedy decoding the
     draft token is accepted exactly when it is the target's argmax there.

   transformers' own assisted-generation loop (``Gemma4AssistantCandidateGenerator``) places the
   query one position later and uses bidirectional masks; this trainer follows vLLM, the engine
   the benchmarks run, and calls the assistant's submodules directly with masks built here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from draft_head_fp8.tiny import TinyPair, save_model, train_tokenizer
from draft_head_fp8.tiny.gemma4 import VOCAB, assistant_config, new_pair_folders, target_config
from tools import draft_replay
from tools.corpus import (
    EOS,
    HELDOUT_EVERY,
    PAD,
    SEQ_LEN,
    encode_documents,
    heldout_prompts,
    pack,
    stdlib_docstring_corpus,
)
from tools.draft_replay import DRAFT_STEPS, TargetPass, offline_acceptance


def distill_loss(draft_logits, queries, tp: TargetPass):
    """Mean over steps of KL(target || draft), the teacher for step ``k`` of query ``i`` being the
    target's distribution at ``i + k``; also the top-1 agreement per step."""
    import torch
    import torch.nn.functional as F

    losses, agree = [], []
    vocab = tp.logits.shape[-1]
    for k, logits in enumerate(draft_logits, start=1):
        teacher = torch.gather(tp.logits, 1, (queries + k).unsqueeze(-1).expand(-1, -1, vocab))
        t_logp = F.log_softmax(teacher.float(), dim=-1)
        s_logp = F.log_softmax(logits.float(), dim=-1)
        losses.append((t_logp.exp() * (t_logp - s_logp)).sum(-1).mean())
        agree.append(float((teacher.argmax(-1) == logits.argmax(-1)).float().mean()))
    return torch.stack(losses).mean(), agree


def self_distillation_rows(
    target, train_data, *, rows: int, prompt_len: int, generator, batch: int = 64
):
    """``rows`` sequences of ``SEQ_LEN`` tokens: a ``prompt_len``-token window of the training data
    followed by the target's greedy continuation (``<eos>`` suppressed so that rows are full).
    The draft is trained on these too: at inference it drafts the target's own greedy text."""
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, rows, batch):
            n = min(batch, rows - start)
            pick = torch.randint(0, train_data.shape[0], (n,), generator=generator)
            offset = int(
                torch.randint(0, train_data.shape[1] - prompt_len + 1, (1,), generator=generator)
            )
            prompts = train_data[pick, offset : offset + prompt_len]
            new = SEQ_LEN - prompt_len
            seqs = target.generate(
                prompts,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=PAD,
                eos_token_id=EOS,
            )
            out.append(seqs[:, :SEQ_LEN])
    return torch.cat(out)


@dataclass
class Schedule:
    target_steps: int = 700
    assistant_steps: int = 600
    batch: int = 16
    target_lr: float = 3e-3
    assistant_lr: float = 3e-3
    warmup: int = 50
    queries_per_row: int = 48  # draft query positions trained per sequence and step
    generated_rows: int = 512  # greedy target continuations the draft is also trained on
    minutes: float = (
        8.0  # safety cap on the whole run; hitting it is recorded (and not deterministic)
    )
    log_every: int = 50
    history: list = field(default_factory=list)


def _lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _batches(data, batch: int, steps: int, generator):
    import torch

    n = data.shape[0]
    order = torch.randperm(n, generator=generator)
    at = 0
    for _ in range(steps):
        if at + batch > n:
            order = torch.randperm(n, generator=generator)
            at = 0
        yield data[order[at : at + batch]]
        at += batch


def train_target(target, data, schedule: Schedule, generator, deadline: float, log) -> dict:
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(
        target.parameters(), lr=schedule.target_lr, betas=(0.9, 0.98), weight_decay=0.01
    )
    target.train()
    done = 0
    stopped = False
    running = None
    for step, batch in enumerate(_batches(data, schedule.batch, schedule.target_steps, generator)):
        if time.monotonic() > deadline:
            stopped = True
            break
        for g in opt.param_groups:
            g["lr"] = _lr(step, schedule.target_steps, schedule.target_lr, schedule.warmup)
        logits = target(input_ids=batch, use_cache=False).logits
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt.step()
        value = loss.item()
        running = value if running is None else 0.9 * running + 0.1 * value
        done = step + 1
        if done % schedule.log_every == 0 or done == schedule.target_steps:
            log(f"target step {done}/{schedule.target_steps} loss {running:.3f}")
            schedule.history.append({"model": "target", "step": done, "loss": round(running, 4)})
    target.eval()
    return {"steps": done, "stopped_by_time_cap": stopped, "final_train_loss": running}


def train_assistant(
    assistant,
    target,
    data,
    generated,
    schedule: Schedule,
    generator,
    deadline: float,
    log,
    replay=draft_replay,
) -> dict:
    """Distil ``assistant`` from the frozen ``target``; ``replay`` is the module that computes the
    draft as vLLM does (``target_pass``, ``unrolled_draft``): ``tools.draft_replay`` for Gemma 4
    MTP, ``tools.eagle_replay`` for Llama EAGLE-1, ``tools.eagle3_replay`` for Llama EAGLE-3 (with
    its own ``distill_loss``)."""
    import torch

    for p in target.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(
        assistant.parameters(), lr=schedule.assistant_lr, betas=(0.9, 0.98), weight_decay=0.01
    )
    assistant.train()
    done = 0
    stopped = False
    running = None
    agree_running = None
    half = schedule.batch // 2
    corpus_batches = _batches(data, schedule.batch - half, schedule.assistant_steps, generator)
    generated_batches = _batches(generated, half, schedule.assistant_steps, generator)
    for step, (a, b) in enumerate(zip(corpus_batches, generated_batches)):
        batch = torch.cat([a, b])
        if time.monotonic() > deadline:
            stopped = True
            break
        for g in opt.param_groups:
            g["lr"] = _lr(step, schedule.assistant_steps, schedule.assistant_lr, schedule.warmup)
        tp = replay.target_pass(target, batch)
        queries = torch.randint(
            0,
            batch.shape[1] - DRAFT_STEPS,
            (batch.shape[0], schedule.queries_per_row),
            generator=generator,
        )
        logits, queries = replay.unrolled_draft(assistant, target, batch, tp, DRAFT_STEPS, queries)
        loss, agree = getattr(replay, "distill_loss", distill_loss)(logits, queries, tp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(assistant.parameters(), 1.0)
        opt.step()
        value = loss.item()
        running = value if running is None else 0.9 * running + 0.1 * value
        agree_running = (
            agree
            if agree_running is None
            else [0.9 * a + 0.1 * b for a, b in zip(agree_running, agree)]
        )
        done = step + 1
        if done % schedule.log_every == 0 or done == schedule.assistant_steps:
            log(
                f"assistant step {done}/{schedule.assistant_steps} KL {running:.3f} "
                f"top1 agreement per step {[round(a, 3) for a in agree_running]}"
            )
            schedule.history.append(
                {
                    "model": "assistant",
                    "step": done,
                    "kl": round(running, 4),
                    "top1_agreement_per_step": [round(a, 4) for a in agree_running],
                }
            )
    assistant.eval()
    return {
        "steps": done,
        "stopped_by_time_cap": stopped,
        "final_train_kl": running,
        "final_train_top1_agreement_per_step": agree_running,
    }


def heldout_eval(target, assistant, data, batch: int = 16, replay=draft_replay) -> dict:
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        rows = data[: max(1, min(len(data), 4 * batch))]
        ce = []
        kls, agrees = [], []
        for start in range(0, rows.shape[0], batch):
            chunk = rows[start : start + batch]
            tp = replay.target_pass(target, chunk)
            ce.append(
                float(
                    F.cross_entropy(
                        tp.logits[:, :-1].reshape(-1, tp.logits.shape[-1]), chunk[:, 1:].reshape(-1)
                    )
                )
            )
            logits, queries = replay.unrolled_draft(assistant, target, chunk, tp, DRAFT_STEPS)
            kl, agree = getattr(replay, "distill_loss", distill_loss)(logits, queries, tp)
            kls.append(float(kl))
            agrees.append(agree)
    return {
        "target_heldout_ce": sum(ce) / len(ce),
        "assistant_heldout_kl": sum(kls) / len(kls),
        "assistant_heldout_top1_agreement_per_step": [
            sum(a[k] for a in agrees) / len(agrees) for k in range(DRAFT_STEPS)
        ],
    }


@dataclass(frozen=True)
class Recipe:
    """What differs between the trained pairs of two families; the rest (corpus, tokenizer, target
    training, distillation loop, evaluation, record) is shared."""

    prog: str
    description: str
    vocab: int
    new_models: Callable  # (data) -> fp32 (target, assistant), right after torch.manual_seed(seed);
    # data (``Data``) for what depends on the corpus (EAGLE-3's draft vocabulary)
    save: Callable  # (target, assistant, tokenizer_dir, pair) -> None: bf16, as vLLM loads it
    evaluated: Callable  # (target, assistant, pair) -> (target, assistant): the saved bf16
    # weights, as float32 models to evaluate
    replay: ModuleType  # target_pass / unrolled_draft: the draft as vLLM computes it; its own
    # distill_loss where it has one (EAGLE-3: over the draft vocabulary)
    schedule: dict = field(default_factory=dict)  # Schedule defaults of this pair
    record: dict = field(default_factory=dict)  # extra fields of training.json


def _gemma_models(data):
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    return Gemma4ForCausalLM(target_config()).float(), Gemma4AssistantForCausalLM(
        assistant_config()
    ).float()


def _gemma_save(target, assistant, tok_dir: Path, pair: TinyPair) -> None:
    save_model(target, tok_dir, pair.target)
    save_model(assistant, tok_dir, pair.assistant)


def _bf16_round_trip(target, assistant, pair: TinyPair):
    import torch

    return target.to(torch.bfloat16).float(), assistant.to(torch.bfloat16).float()


GEMMA4 = Recipe(
    prog="python -m tools.train_tiny_pair",
    description="Train the tiny Gemma 4 target + MTP assistant pair on stdlib docstrings "
    "(CPU, minutes).",
    vocab=VOCAB,
    new_models=_gemma_models,
    save=_gemma_save,
    evaluated=_bf16_round_trip,
    replay=draft_replay,
)


@dataclass
class Data:
    tokenizer: object
    corpus: object
    train: object  # [N, SEQ_LEN] packed rows
    heldout: object


def prepare_data(tok_dir: Path, vocab: int, log) -> Data:
    """The tokenizer (``tiny.train_tokenizer``, as every tiny builder trains it) into ``tok_dir``,
    and the corpus, tokenized and packed."""
    from transformers import AutoTokenizer

    train_tokenizer(tok_dir, vocab)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    corpus = stdlib_docstring_corpus()
    data = Data(
        tokenizer=tokenizer,
        corpus=corpus,
        train=pack(encode_documents(tokenizer, corpus.train)),
        heldout=pack(encode_documents(tokenizer, corpus.heldout)),
    )
    log(
        f"corpus: {len(corpus.train)} train docs ({corpus.train_modules} files, "
        f"{data.train.numel()} tokens), {len(corpus.heldout)} held-out docs "
        f"({corpus.heldout_modules} files, {data.heldout.numel()} tokens)"
    )
    return data


def _train_both(recipe: Recipe, data: Data, schedule: Schedule, generator, deadline, log, clock):
    """Target, then self-distillation rows, then the assistant. ``clock`` gets seconds per phase."""
    target, assistant = recipe.new_models(data)
    t0 = time.monotonic()
    target_info = train_target(target, data.train, schedule, generator, deadline, log)
    clock["target"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    generated = self_distillation_rows(
        target, data.train, rows=schedule.generated_rows, prompt_len=32, generator=generator
    )
    clock["self_distillation_data"] = round(time.monotonic() - t0, 1)
    log(
        f"self-distillation: {generated.shape[0]} greedy target continuations "
        f"in {clock['self_distillation_data']:.1f}s"
    )
    t0 = time.monotonic()
    assistant_info = train_assistant(
        assistant, target, data.train, generated, schedule, generator, deadline, log, recipe.replay
    )
    clock["assistant"] = round(time.monotonic() - t0, 1)
    return target, assistant, {"target": target_info, "assistant": assistant_info}


def evaluate(recipe: Recipe, target, assistant, data: Data, eval_prompts: int) -> dict:
    """Held-out cross-entropy, KL and top-1 agreement, and the offline acceptance replay on
    ``eval_prompts`` held-out prompts (24 tokens each, 32 generated)."""
    evaluation = heldout_eval(target, assistant, data.heldout, replay=recipe.replay)
    setup = {"prompts": eval_prompts, "prompt_tokens": 24, "new_tokens": 32}
    prompts = heldout_prompts(
        data.tokenizer, data.corpus, count=eval_prompts, prompt_tokens=setup["prompt_tokens"]
    )
    evaluation["offline_acceptance"] = offline_acceptance(
        target,
        assistant,
        prompts,
        new_tokens=setup["new_tokens"],
        steps=DRAFT_STEPS,
        replay=recipe.replay,
    )
    evaluation["offline_acceptance_setup"] = setup
    return evaluation


def train_pair(
    out: str | os.PathLike,
    *,
    seed: int = 0,
    schedule: Schedule | None = None,
    threads: int | None = 1,
    eval_prompts: int = 8,
    log=print,
    recipe: Recipe = GEMMA4,
) -> TinyPair:
    """Build the tokenizer, train the target then the assistant, save both (bf16) into
    ``out/target`` and ``out/assistant``, and write ``out/training.json``."""
    import torch

    schedule = schedule or Schedule(**recipe.schedule)
    out = Path(out)
    pair = new_pair_folders(out)
    if threads:
        torch.set_num_threads(threads)
    started = time.monotonic()
    deadline = started + schedule.minutes * 60
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    clock: dict = {}
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tok_dir = Path(scratch) / "tokenizer"
        data = prepare_data(tok_dir, recipe.vocab, log)
        clock["corpus_and_tokenizer"] = round(time.monotonic() - started, 1)
        torch.manual_seed(seed)
        target, assistant, trained = _train_both(
            recipe, data, schedule, generator, deadline, log, clock
        )
        recipe.save(target, assistant, tok_dir, pair)
    # What vLLM will load: bf16. Evaluate that, not the fp32 training copy.
    target, assistant = recipe.evaluated(target, assistant, pair)
    t0 = time.monotonic()
    evaluation = evaluate(recipe, target, assistant, data, eval_prompts)
    clock["evaluation"] = round(time.monotonic() - t0, 1)
    log(f"held-out: {json.dumps(evaluation)}")
    clock["total"] = round(time.monotonic() - started, 1)
    record = training_record(recipe, seed, threads, data, schedule, trained, evaluation, clock)
    (out / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    return pair


def training_record(
    recipe, seed, threads, data: Data, schedule: Schedule, trained, evaluation, clock
) -> dict:
    import torch

    return {
        "schema": "draft-head-fp8-tiny-pair-training/v1",
        **recipe.record,
        "seed": seed,
        "threads": threads,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "corpus": {
            "source": "docstrings (module, classes, functions) of the Python standard library's "
            f"top-level .py files, read with ast; one file in {HELDOUT_EVERY} held out",
            "train_documents": len(data.corpus.train),
            "train_files": data.corpus.train_modules,
            "train_tokens": int(data.train.numel()),
            "heldout_documents": len(data.corpus.heldout),
            "heldout_files": data.corpus.heldout_modules,
            "heldout_tokens": int(data.heldout.numel()),
            "seq_len": SEQ_LEN,
        },
        "schedule": {
            "target_steps": schedule.target_steps,
            "assistant_steps": schedule.assistant_steps,
            "batch": schedule.batch,
            "target_lr": schedule.target_lr,
            "assistant_lr": schedule.assistant_lr,
            "warmup": schedule.warmup,
            "draft_steps_unrolled": DRAFT_STEPS,
            "draft_queries_per_row": schedule.queries_per_row,
            "self_distillation_rows": schedule.generated_rows,
            "minutes_cap": schedule.minutes,
        },
        **trained,
        "evaluation_bf16_weights": evaluation,
        "seconds": clock,
        "history": schedule.history,
    }


def main(argv: list[str] | None = None, recipe: Recipe = GEMMA4) -> int:
    defaults = Schedule(**recipe.schedule)
    parser = argparse.ArgumentParser(prog=recipe.prog, description=recipe.description)
    parser.add_argument("out", help="output folder (gets target/, assistant/, training.json)")
    parser.add_argument(
        "--minutes", type=float, default=8.0, help="safety cap on the whole run (default 8)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-steps", type=int, default=defaults.target_steps)
    parser.add_argument("--assistant-steps", type=int, default=defaults.assistant_steps)
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 is fastest on a shared 2-core machine; results are bitwise "
        "reproducible for a fixed thread count)",
    )
    parser.add_argument("--generated-rows", type=int, default=defaults.generated_rows)
    parser.add_argument("--queries-per-row", type=int, default=defaults.queries_per_row)
    parser.add_argument("--eval-prompts", type=int, default=8)
    args = parser.parse_args(argv)
    schedule = Schedule(
        **{
            **recipe.schedule,
            "target_steps": args.target_steps,
            "assistant_steps": args.assistant_steps,
            "batch": args.batch,
            "generated_rows": args.generated_rows,
            "queries_per_row": args.queries_per_row,
            "minutes": args.minutes,
            "log_every": max(1, min(50, args.target_steps // 10 or 1)),
        }
    )
    pair = train_pair(
        args.out,
        seed=args.seed,
        schedule=schedule,
        threads=args.threads,
        eval_prompts=args.eval_prompts,
        recipe=recipe,
    )
    print(f"wrote {pair.target} and {pair.assistant}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
