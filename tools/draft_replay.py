"""The draft computation exactly as vLLM's Gemma 4 MTP proposer runs it, in pure torch and
transformers: a draft query per target position, KV-shared draft layers, the target's embedding,
and greedy speculative decoding replayed offline (``offline_acceptance``). The trainer learns
through it; the benchmarks replay it with other heads. See ``tools/train_tiny_pair.py`` for how
it follows vLLM.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tools.corpus import EOS, PAD

DRAFT_STEPS = 3


@dataclass
class TargetPass:
    hidden: object  # [B, T, backbone] final-normed
    shared_kv: dict  # layer type -> (K, V) [B, kv_heads, T, head_dim]
    logits: object  # [B, T, vocab]


def target_pass(target, tokens) -> TargetPass:
    import torch

    with torch.no_grad():
        out = target.model(input_ids=tokens, use_cache=False, return_shared_kv_states=True)
        logits = target.lm_head(out.last_hidden_state)
        cap = target.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
    return TargetPass(
        hidden=out.last_hidden_state, shared_kv=dict(out.shared_kv_states), logits=logits
    )


def draft_step(assistant, target, input_ids, hidden, shared_kv, positions, masks, head=None):
    """One draft step for a block of queries. Returns (draft_hidden normed [.., H_draft],
    backbone_hidden [.., H_backbone], logits [.., vocab])."""
    import torch

    embeds = target.model.embed_tokens(input_ids)  # Gemma4TextScaledWordEmbedding: * sqrt(backbone)
    combined = torch.cat([embeds, hidden], dim=-1)
    x = assistant.pre_projection(combined)
    out = assistant.model(
        inputs_embeds=x,
        attention_mask=masks,
        position_ids=positions,
        shared_kv_states=shared_kv,
        use_cache=False,
    )
    draft_hidden = out.last_hidden_state
    backbone = assistant.post_projection(draft_hidden)
    logits = assistant.lm_head(draft_hidden) if head is None else head(draft_hidden)
    cap = assistant.config.get_text_config().final_logit_softcapping
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return draft_hidden, backbone, logits


def unrolled_draft(
    assistant,
    target,
    tokens,
    tp: TargetPass,
    steps: int,
    queries=None,
    *,
    teacher_forced=True,
    hidden_out=None,
    head=None,
):
    """Teacher-forced draft logits, ``steps`` draft steps deep, for query positions ``queries``
    (``[B, P]`` target positions ``i``; default: every ``i`` with ``i + steps <= T - 1``).

    Step ``k`` of the query at ``i`` gets token ``tokens[i+k]`` and, for ``k = 1``, the target's
    hidden state at ``i``, else the previous step's backbone output; it attends to target K/V
    ``0..i``. Queries never see each other (the draft writes no K/V), so any subset of positions
    can be trained at once. With ``teacher_forced=False``, steps 2+ get the previous step's own
    argmax instead, as vLLM drafts. ``hidden_out``, a list, receives each step's final-normed draft
    hidden state (what the draft head is applied to). ``head``, a callable on those hidden states,
    replaces the assistant's own ``lm_head`` (e.g. an FP8 head). Returns
    ``(logits per step [B, P, vocab], queries)``."""
    import torch

    batch, length = tokens.shape
    if queries is None:
        queries = torch.arange(length - steps, device=tokens.device).unsqueeze(0).expand(batch, -1)
    window = assistant.config.get_text_config().sliding_window
    j = torch.arange(length, device=tokens.device).view(1, 1, length)
    i = queries.unsqueeze(-1)
    full = j <= i
    masks = {
        "full_attention": full.unsqueeze(1),
        "sliding_attention": (full & (j > i - window)).unsqueeze(1),
    }
    hidden = torch.gather(tp.hidden, 1, queries.unsqueeze(-1).expand(-1, -1, tp.hidden.shape[-1]))
    all_logits = []
    ids = torch.gather(tokens, 1, queries + 1)
    for k in range(1, steps + 1):
        if k > 1:
            ids = (
                torch.gather(tokens, 1, queries + k)
                if teacher_forced
                else all_logits[-1].argmax(-1)
            )
        draft_hidden, hidden, logits = draft_step(
            assistant, target, ids, hidden, tp.shared_kv, queries, masks, head=head
        )
        if hidden_out is not None:
            hidden_out.append(draft_hidden)
        all_logits.append(logits)
    return all_logits, queries


def greedy_continuation(target, prompt: list[int], new_tokens: int) -> list[int]:
    """The target's greedy continuation (stops after ``<eos>``)."""
    import torch

    with torch.no_grad():
        out = target.generate(
            torch.tensor([prompt]),
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=PAD,
            eos_token_id=EOS,
        )
    return out[0, len(prompt) :].tolist()


def offline_acceptance(
    target,
    assistant,
    prompts: list[list[int]],
    *,
    new_tokens: int,
    steps: int,
    heads: dict | None = None,
    replay=None,
) -> dict:
    """Greedy speculative decoding simulated in torch, an estimate of what vLLM will measure: the
    target's greedy continuation of each prompt; a proposal after position ``i`` drafts ``steps``
    tokens greedily (each from the draft's own previous token); the longest prefix that matches
    the target is accepted, then the target's bonus token; the next proposal follows position
    ``i + accepted + 1``. Drafts for every position are computed in one batch (the draft of
    position ``i`` does not depend on other positions), then the acceptance walk is replayed.

    ``heads``: name -> draft head callable (None: the assistant's own ``lm_head``); all heads are
    replayed on the same continuations (a paired comparison) and a dict per name is returned.
    Without ``heads``, the counters of the assistant's own head are returned directly.

    ``replay``: the module that computes the draft as vLLM does (``target_pass``,
    ``unrolled_draft``); this one (Gemma 4 MTP) by default, ``tools.eagle_replay`` for EAGLE-1."""
    import torch

    replay = replay or sys.modules[__name__]

    names = list(heads) if heads else ["lm_head"]
    counters = {
        name: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * steps}
        for name in names
    }
    with torch.no_grad():
        for prompt in prompts:
            seq = prompt + greedy_continuation(target, prompt, new_tokens)
            length = len(seq)
            if length <= len(prompt):
                continue
            tokens = torch.tensor([seq + [PAD] * (steps + 1)])
            tp = replay.target_pass(target, tokens)
            queries = torch.arange(len(prompt) - 1, length - 1).unsqueeze(0)
            for name in names:
                head = heads[name] if heads else None
                logits, _ = replay.unrolled_draft(
                    assistant, target, tokens, tp, steps, queries, teacher_forced=False, head=head
                )
                proposal = torch.stack(
                    [lg[0].argmax(-1) for lg in logits], dim=1
                ).tolist()  # [P, steps]
                c = counters[name]
                i = len(prompt) - 1
                while i + 1 < length - 1:  # the token after t[i+1] is still to be generated
                    row = proposal[i - (len(prompt) - 1)]
                    n_acc = 0
                    for k in range(1, steps + 1):
                        if i + 1 + k < length and row[k - 1] == seq[i + 1 + k]:
                            n_acc += 1
                            c["per_pos"][k - 1] += 1
                        else:
                            break
                    c["drafts"] += 1
                    c["draft_tokens"] += steps
                    c["accepted"] += n_acc
                    i += n_acc + 1

    def summary(c):
        d = c["drafts"]
        return {
            "num_drafts": d,
            "num_draft_tokens": c["draft_tokens"],
            "num_accepted_tokens": c["accepted"],
            "acceptance_rate": c["accepted"] / c["draft_tokens"] if c["draft_tokens"] else 0.0,
            "mean_acceptance_length": 1 + c["accepted"] / d if d else 0.0,
            "accepted_per_position": [p / d if d else 0.0 for p in c["per_pos"]],
        }

    if not heads:
        return summary(counters["lm_head"])
    return {name: summary(c) for name, c in counters.items()}
