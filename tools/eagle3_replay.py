"""The draft computation exactly as vLLM's Llama EAGLE-3 proposer runs it on the V1 runner, in pure
torch on transformers' Llama modules: the interface of ``tools/draft_replay.py`` and
``tools/eagle_replay.py`` (``target_pass``, ``unrolled_draft``, and here ``distill_loss``), so the
trainer, its evaluation and ``offline_acceptance`` take it as they take those.

What vLLM computes, read from ``vllm/model_executor/models/llama_eagle3.py``
(``LlamaDecoderLayer``, ``LlamaModel``, ``Eagle3LlamaForCausalLM``), ``llama.py``,
``interfaces.py`` (``EagleModelMixin``, ``SupportsEagle3``), ``v1/spec_decode/eagle.py``,
``llm_base_proposer.py`` and ``v1/worker/gpu_model_runner.py`` (vLLM 0.32):

- the target hands the drafter its **auxiliary hidden states**, not its output: the runner asks
  for the draft config's ``eagle_aux_hidden_state_layer_ids`` or else the model's
  ``get_eagle3_default_aux_hidden_state_layers()`` = ``(2, n // 2, n - 3)`` for ``n`` layers,
  which ``set_aux_hidden_state_layers`` stores sorted and unique (``aux_layers``; ``(0, 1, 2)``
  for the tiny 3-layer target); ``LlamaModel.forward`` appends ``hidden_states + residual`` at
  the *input* of each such layer (layer 0: the raw embedding), in layer order; the runner joins
  them on the last axis (``torch.cat(aux_hidden_states, -1)``, ``3 x hidden``);
- ``propose`` first runs ``combine_hidden_states``: ``fc`` over that join (no ``norm_before_fc``,
  no ``fc_norm`` in these configs);
- first pass (``set_inputs_first_pass``): every target position ``p`` gets the token after it
  (input ids shifted by one, the last slot the token just sampled) at position ``p``, and writes
  the draft's K/V there: a proposal after ``i`` attends to K/V ``0..i`` made from the target's
  states, never from earlier drafts;
- the one layer (``layer_idx`` 0, ``norm_after_residual``): ``e = input_layernorm(E(t))`` with
  ``E`` the *target's* embedding (the draft ships none: ``_maybe_share_embeddings``),
  ``residual = h``, ``x = cat(e, hidden_norm(h))`` (``2 x hidden``) into q/k/v;
  ``r = attn(x) + residual`` and ``mlp(post_attention_layernorm(r))``; then the model's
  ``norm(mlp_out, r)`` gives ``post = norm(mlp_out + r)`` and ``pre = mlp_out + r``;
- logits: the draft's own ``lm_head`` (``draft_vocab_size`` rows) on ``post``;
  ``compute_logits`` scatters them to the target ids ``arange(draft_vocab) + d2t`` and fills the
  rest with ``-inf``; the proposer takes the argmax (greedy drafting), a target id;
- draft step ``k >= 2``: position ``i + k - 1`` (``constant_draft_positions`` False), token = the
  previous step's draft token, hidden = the previous step's ``pre`` (``norm_output`` False: the
  model returns ``(post, pre)``, the proposer samples from the first and feeds back the second;
  ``fc`` is not applied again); it attends to the first-pass K/V ``0..i`` and to the K/V the
  earlier steps of the same proposal wrote at ``i + 1 .. i + k - 1``, and its own.

Label of step ``k`` of the proposal after ``i``: the target's distribution at ``i + k``.
"""

from __future__ import annotations

from pathlib import Path

from tools.draft_replay import TargetPass
from tools.eagle_replay import _attend, _gather, _project


def aux_layers(num_layers: int) -> tuple[int, ...]:
    """The target layers whose inputs the drafter reads: vLLM's default for a Llama target
    without ``eagle_aux_hidden_state_layer_ids``, as ``_set_aux_hidden_state_layers`` keeps it."""
    return tuple(sorted({2, num_layers // 2, num_layers - 3}))


def target_pass(target, tokens) -> TargetPass:
    """A ``LlamaForCausalLM`` target on ``tokens``: ``hidden`` is the join of its auxiliary hidden
    states (``[B, T, 3 x hidden]``, what the runner hands the EAGLE-3 drafter), and its logits."""
    import torch

    with torch.no_grad():
        out = target.model(input_ids=tokens, use_cache=False, output_hidden_states=True)
        # transformers' hidden_states[k] is the residual stream entering layer k (k = 0: the
        # embedding), which is vLLM's hidden_states + residual there.
        layers = aux_layers(target.config.num_hidden_layers)
        joined = torch.cat([out.hidden_states[k] for k in layers], dim=-1)
        logits = target.lm_head(out.last_hidden_state)
    return TargetPass(hidden=joined, shared_kv={}, logits=logits)


def _config():
    from draft_head_fp8.tiny.llama_eagle3 import target_config

    config = target_config()
    config.num_hidden_layers = 1
    return config


def new_draft(ids):
    """A fresh EAGLE-3 draft (fp32) over the draft vocabulary ``ids`` (sorted target ids): the
    decoder layer of a one-layer ``LlamaForCausalLM`` (transformers' initialisation) with q/k/v
    reading ``2 x hidden`` and a ``hidden_norm``, its rotary embedding, ``fc``
    (``[hidden, 3 x hidden]``), the final ``norm`` and ``lm_head`` (``[len(ids), hidden]``, the
    ids kept beside it as ``lm_head.target_ids``)."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    config = _config()
    llama = LlamaForCausalLM(config)
    layer = llama.model.layers[0]
    hidden, std = config.hidden_size, config.initializer_range

    def linear(rows: int, cols: int):
        out = torch.nn.Linear(cols, rows, bias=False)
        torch.nn.init.normal_(out.weight, std=std)
        return out

    attn = layer.self_attn
    attn.q_proj = linear(attn.q_proj.out_features, 2 * hidden)
    attn.k_proj = linear(attn.k_proj.out_features, 2 * hidden)
    attn.v_proj = linear(attn.v_proj.out_features, 2 * hidden)
    layer.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
    head = linear(len(ids), hidden)
    head.register_buffer("target_ids", torch.as_tensor(ids, dtype=torch.long), persistent=False)
    return torch.nn.ModuleDict(
        {
            "layer": layer,
            "rotary": llama.model.rotary_emb,
            "fc": linear(hidden, 3 * hidden),
            "norm": LlamaRMSNorm(hidden, eps=config.rms_norm_eps),
            "lm_head": head,
        }
    ).float()


def draft_tensors(draft) -> dict:
    """The draft's tensors under the names ``tiny.llama_eagle3`` writes and vLLM's
    ``Eagle3LlamaForCausalLM.load_weights`` reads (``midlayer.*``, ``fc``, ``norm``,
    ``lm_head``), bf16, with ``d2t``/``t2d`` of its vocabulary."""
    import torch

    from draft_head_fp8.tiny.llama_eagle3 import vocabulary_tensors

    tensors = {f"midlayer.{k}": v for k, v in draft["layer"].state_dict().items()}
    tensors.update({f"{m}.weight": draft[m].weight for m in ("fc", "norm", "lm_head")})
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in tensors.items()}
    return tensors | vocabulary_tensors(draft["lm_head"].target_ids)


def load_draft(folder: Path):
    """A shipped EAGLE-3 draft folder, as vLLM reads it, into ``new_draft()``'s modules, float32
    from the stored bf16; the vocabulary from ``d2t`` (``arange(rows) + d2t``)."""
    import torch
    from safetensors.torch import load_file

    from draft_head_fp8.tiny.common import WEIGHTS

    tensors = load_file(Path(folder) / WEIGHTS)
    rows = tensors["lm_head.weight"].shape[0]
    ids = torch.arange(rows) + tensors.get("d2t", torch.zeros(rows, dtype=torch.long))
    draft = new_draft(ids)
    prefix = "midlayer."
    layer = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
    draft["layer"].load_state_dict(layer, strict=True)
    with torch.no_grad():
        for m in ("fc", "norm", "lm_head"):
            draft[m].weight.copy_(tensors[f"{m}.weight"])
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


def to_target_ids(draft, logits, vocab: int):
    """``compute_logits``: draft-vocabulary logits placed at their target ids, ``-inf``
    elsewhere."""
    out = logits.new_full((*logits.shape[:-1], vocab), float("-inf"))
    out[..., draft["lm_head"].target_ids] = logits
    return out


def _step_input(draft, embed, ids, hidden):
    """The layer's attention input ``cat(input_layernorm(E(ids)), hidden_norm(hidden))``."""
    import torch

    layer = draft["layer"]
    return torch.cat([layer.input_layernorm(embed(ids)), layer.hidden_norm(hidden)], dim=-1)


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
    """Draft logits over the target's vocabulary (``-inf`` off the draft vocabulary), ``steps``
    draft steps deep, for the proposals after target positions ``queries`` ([B, P]; default every
    ``i`` with ``i + steps <= T - 1``), as vLLM computes them (module docstring). Step ``k`` gets
    token ``tokens[i+k]`` (teacher-forced) or, with ``teacher_forced=False``, the previous step's
    argmax, as vLLM drafts. ``hidden_out``, a list, receives each step's final-normed hidden state
    (what the head is applied to); ``head`` replaces the draft's own ``lm_head`` (draft-vocabulary
    rows, e.g. an FP8 head).

    Returns ``(logits per step [B, P, vocab], queries)``."""
    import torch

    batch, length = tokens.shape
    if queries is None:
        queries = torch.arange(length - steps, device=tokens.device).unsqueeze(0).expand(batch, -1)
    head = draft["lm_head"] if head is None else head
    embed, vocab = target.model.embed_tokens, target.config.vocab_size
    layer = draft["layer"]
    # The first pass: position p (0..T-2) gets t[p+1] and fc(aux_p); its K/V is what proposals see.
    first_hidden = draft["fc"](tp.hidden[:, :-1])
    first = _step_input(draft, embed, tokens[:, 1:], first_hidden)
    every = torch.arange(length - 1, device=tokens.device).unsqueeze(0).expand(batch, -1)
    _, keys, values = _project(draft, first, every)
    visible = (every.unsqueeze(1) <= queries.unsqueeze(-1)).unsqueeze(1)  # key p <= query i
    x, residual = _gather(first, queries), _gather(first_hidden, queries)
    step_kv, all_logits, pre = [], [], None
    for k in range(1, steps + 1):
        if k > 1:
            ids = _gather(tokens, queries + k) if teacher_forced else all_logits[-1].argmax(-1)
            x, residual = _step_input(draft, embed, ids, pre), pre
        q, key, value = _project(draft, x, queries + (k - 1))
        if k > 1:
            step_kv.append((key, value))
        r = residual + _attend(draft, q, (keys, values), visible, step_kv)
        pre = r + layer.mlp(layer.post_attention_layernorm(r))
        post = draft["norm"](pre)
        if hidden_out is not None:
            hidden_out.append(post)
        all_logits.append(to_target_ids(draft, head(post), vocab))
    return all_logits, queries


def distill_loss(draft_logits, queries, tp: TargetPass):
    """Mean over steps of KL(target || draft) over the draft vocabulary (the target's distribution
    at ``i + k`` restricted to it and renormalised: the draft can propose nothing else), and the
    top-1 agreement per step with the target's argmax over its whole vocabulary (what acceptance
    counts)."""
    import torch
    import torch.nn.functional as F

    losses, agree = [], []
    vocab = tp.logits.shape[-1]
    # The draft vocabulary: the columns compute_logits leaves finite.
    ids = torch.isfinite(draft_logits[0].reshape(-1, vocab)[0]).nonzero().squeeze(-1)
    for k, logits in enumerate(draft_logits, start=1):
        teacher = torch.gather(tp.logits, 1, (queries + k).unsqueeze(-1).expand(-1, -1, vocab))
        t_logp = F.log_softmax(teacher[..., ids].float(), dim=-1)
        s_logp = F.log_softmax(logits[..., ids].float(), dim=-1)
        losses.append((t_logp.exp() * (t_logp - s_logp)).sum(-1).mean())
        agree.append(float((teacher.argmax(-1) == logits.argmax(-1)).float().mean()))
    return torch.stack(losses).mean(), agree
