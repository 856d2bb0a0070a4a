"""The draft computation exactly as vLLM's Llama EAGLE-1 proposer runs it, in pure torch on
transformers' Llama modules: the same interface as ``tools/draft_replay.py`` (``target_pass``,
``unrolled_draft``), so the trainer, its evaluation and ``offline_acceptance`` take either.

What vLLM computes, read from ``vllm/model_executor/models/llama_eagle.py`` (``LlamaModel``,
``EagleLlamaForCausalLM``), ``llama.py``, ``v1/spec_decode/llm_base_proposer.py`` and
``v1/worker/gpu_model_runner.py`` (vLLM 0.32):

- the target's hidden state handed to the drafter is what the target ``LlamaModel.forward``
  returns: the output of its final norm (``self.norm(hidden_states, residual)``); EAGLE-1 asks
  for no auxiliary layers (that is EAGLE-3);
- first pass (``set_inputs_first_pass``): every target position ``p`` of the step gets the token
  after it (the input ids shifted by one; the last slot the token just sampled) and ``h_p``, at
  position ``p``: ``x_p = fc(cat(E(t[p+1]), h_p))``, ``E`` the *target's* embedding (the draft
  ships none, ``_maybe_share_embeddings``), no scaling. This pass writes the draft's K/V for
  every such position: a proposal after position ``i`` attends to K/V ``0..i`` made from the
  target's hidden states, never from earlier drafts (those positions were rewritten when the
  target verified them);
- the one decoder layer has no input norm (``disable_input_layernorm`` on layer 0):
  ``r = x + attn(x)``, ``y = r + mlp(post_attention_layernorm(r))``; there is no final norm
  (``LlamaModel.forward`` returns ``hidden_states + residual`` twice);
- logits are the target's ``lm_head`` (shared, ``_maybe_share_lm_head``) on ``y``, un-normed
  (``LlamaForCausalLM.compute_logits``; ``logit_scale`` 1);
- draft step ``k >= 2`` (the loop in ``propose``): position ``i + k - 1`` (positions advance by
  one, ``constant_draft_positions`` is False), token = the previous step's argmax, hidden = the
  previous step's ``y``; it attends to the first-pass K/V ``0..i`` and to the K/V the earlier
  steps of the same proposal wrote at ``i + 1 .. i + k - 1``, and its own.

Label of step ``k`` of the proposal after ``i``: the target's distribution at ``i + k``.
"""

from __future__ import annotations

from pathlib import Path

from tools.draft_replay import TargetPass


def target_pass(target, tokens) -> TargetPass:
    """A ``LlamaForCausalLM`` target on ``tokens``: its final-normed hidden states (what vLLM's
    runner hands the EAGLE drafter) and logits. EAGLE-1 shares no K/V with the target."""
    import torch

    with torch.no_grad():
        hidden = target.model(input_ids=tokens, use_cache=False).last_hidden_state
        logits = target.lm_head(hidden)
    return TargetPass(hidden=hidden, shared_kv={}, logits=logits)


def new_draft():
    """A fresh EAGLE-1 draft (fp32): the decoder layer of a one-layer ``LlamaForCausalLM`` of
    ``tiny.llama_eagle1.config(1)`` (transformers' initialisation), its rotary embedding, and
    ``fc`` (``[hidden, 2 * hidden]``, no bias). The layer's ``input_layernorm`` is never used."""
    import torch
    from transformers import LlamaForCausalLM

    from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, config

    llama = LlamaForCausalLM(config(1))
    fc = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
    torch.nn.init.normal_(fc.weight, std=llama.config.initializer_range)
    return torch.nn.ModuleDict(
        {"layer": llama.model.layers[0], "rotary": llama.model.rotary_emb, "fc": fc}
    ).float()


def as_llama(draft):
    """The draft's layer inside a one-layer ``LlamaForCausalLM`` (what ``save_draft`` cuts)."""
    from transformers import LlamaForCausalLM

    from draft_head_fp8.tiny.llama_eagle1 import config

    llama = LlamaForCausalLM(config(1))
    llama.model.layers[0].load_state_dict(draft["layer"].state_dict())
    return llama


def load_draft(folder: Path):
    """A shipped EAGLE-1 draft folder (``layers.0.*`` without the input norm, ``fc.weight``), as
    vLLM reads it, into ``new_draft()``'s modules, float32 from the stored bf16."""
    import torch
    from safetensors.torch import load_file

    from draft_head_fp8.tiny.common import WEIGHTS

    tensors = load_file(Path(folder) / WEIGHTS)
    draft = new_draft()
    prefix = "layers.0."
    layer = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
    missing, unexpected = draft["layer"].load_state_dict(layer, strict=False)
    if missing != ["input_layernorm.weight"] or unexpected:
        raise ValueError(f"not an EAGLE-1 draft layer: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        draft["fc"].weight.copy_(tensors["fc.weight"])
    return draft.float().eval()


def load_pair(pair):
    """The pair as vLLM loads it (bf16 weights), as float32 models: (target, draft)."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a bar per 1 MB file is noise in tests and the record
    try:
        target = LlamaForCausalLM.from_pretrained(pair.target, dtype=torch.bfloat16)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    return target.float().eval(), load_draft(pair.assistant)


def _project(draft, x, positions):
    """Queries, keys and values of the draft layer for inputs ``x`` [B, P, H] at ``positions``
    [B, P], rotated; [B, heads, P, head_dim], keys and values repeated to the query heads."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

    attn = draft["layer"].self_attn
    shape = (*x.shape[:-1], -1, attn.head_dim)
    q = attn.q_proj(x).view(shape).transpose(1, 2)
    k = attn.k_proj(x).view(shape).transpose(1, 2)
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    cos, sin = draft["rotary"](x, positions)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    groups = attn.num_key_value_groups
    return q, repeat_kv(k, groups), repeat_kv(v, groups)


def _attend(draft, q, first_kv, visible, step_kv):
    """Attention of queries ``q`` [B, h, P, d] over the first-pass K/V [B, h, N, d] where
    ``visible`` [B, 1, P, N], plus each query's own K/V of this proposal's draft steps
    (a list of [B, h, P, d] pairs: one key per step, per query)."""
    import torch

    attn = draft["layer"].self_attn
    keys, values = first_kv
    scores = torch.matmul(q, keys.transpose(-1, -2)) * attn.scaling
    scores = scores.masked_fill(~visible, float("-inf"))
    own = [(q * k).sum(-1, keepdim=True) * attn.scaling for k, _ in step_kv]
    weights = torch.softmax(torch.cat([scores, *own], dim=-1).float(), dim=-1).to(q.dtype)
    n = keys.shape[-2]
    out = torch.matmul(weights[..., :n], values)
    for m, (_, v) in enumerate(step_kv):
        out = out + weights[..., n + m : n + m + 1] * v
    out = out.transpose(1, 2).reshape(*q.shape[:1], q.shape[2], -1)
    return attn.o_proj(out)


def _layer_rest(draft, x, attended):
    """The rest of vLLM's EAGLE layer: residual, post-attention norm, MLP, residual; no final
    norm."""
    layer = draft["layer"]
    r = x + attended
    return r + layer.mlp(layer.post_attention_layernorm(r))


def _gather(t, index):
    import torch

    if t.dim() == 2:
        return torch.gather(t, 1, index)
    return torch.gather(t, 1, index.unsqueeze(-1).expand(-1, -1, t.shape[-1]))


def unrolled_draft(
    draft,
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
    """Draft logits, ``steps`` draft steps deep, for the proposals after target positions
    ``queries`` ([B, P]; default every ``i`` with ``i + steps <= T - 1``), as vLLM computes them
    (module docstring). Step ``k`` gets token ``tokens[i+k]`` (teacher-forced) or, with
    ``teacher_forced=False``, the previous step's argmax, as vLLM drafts. ``hidden_out``, a list,
    receives each step's hidden state (what the head is applied to); ``head`` replaces the
    target's ``lm_head`` (e.g. an FP8 head).

    Returns ``(logits per step [B, P, vocab], queries)``."""
    import torch

    batch, length = tokens.shape
    if queries is None:
        queries = torch.arange(length - steps, device=tokens.device).unsqueeze(0).expand(batch, -1)
    head = target.lm_head if head is None else head
    embed = target.model.embed_tokens
    # The first pass: position p (0..T-2) gets t[p+1] and h_p; its K/V is what proposals see.
    first = draft["fc"](torch.cat([embed(tokens[:, 1:]), tp.hidden[:, :-1]], dim=-1))
    every = torch.arange(length - 1, device=tokens.device).unsqueeze(0).expand(batch, -1)
    _, keys, values = _project(draft, first, every)
    visible = (every.unsqueeze(1) <= queries.unsqueeze(-1)).unsqueeze(1)  # key p <= query i
    x, hidden, step_kv, all_logits = _gather(first, queries), None, [], []
    for k in range(1, steps + 1):
        if k > 1:
            ids = _gather(tokens, queries + k) if teacher_forced else all_logits[-1].argmax(-1)
            x = draft["fc"](torch.cat([embed(ids), hidden], dim=-1))
        q, key, value = _project(draft, x, queries + (k - 1))
        if k > 1:
            step_kv.append((key, value))
        hidden = _layer_rest(draft, x, _attend(draft, q, (keys, values), visible, step_kv))
        if hidden_out is not None:
            hidden_out.append(hidden)
        all_logits.append(head(hidden))
    return all_logits, queries
