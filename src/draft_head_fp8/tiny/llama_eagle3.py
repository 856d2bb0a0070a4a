"""Tiny real Llama EAGLE-3 checkpoints (family ``llama-eagle3``): a Llama target with an untied
head (three layers: vLLM's default auxiliary layers, ``(2, n // 2, n - 3)``, are then the inputs
of layers 2, 1 and 0, three different hidden states), and an
EAGLE-3 draft folder as vLLM's ``Eagle3LlamaForCausalLM.load_weights`` reads it:

- ``midlayer.*``: one decoder layer whose attention reads ``2 x hidden`` (the normed token
  embedding beside the normed ``fc`` output), with ``hidden_norm``;
- ``fc.weight`` (``[hidden, 3 x hidden]``): the three auxiliary hidden states of the target,
  joined; ``norm.weight``;
- the head, by variant: its own ``lm_head.weight`` over ``draft_vocab_size`` rows and ``d2t``
  (draft id -> target id offset) where the draft vocabulary is a subset of the target's, or no
  head at all (vLLM then shares the target's, as for EAGLE-1).

No embedding: vLLM shares the target's, as every published EAGLE-3 draft expects. The draft's
weights come from ``Randoms`` (seeded, bf16): transformers has no EAGLE-3 model to save, and the
decoder layer's shapes are not a Llama layer's (the ``2 x hidden`` attention input).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    WEIGHTS,
    Randoms,
    TinyPair,
    copy_tokenizer,
    new_pair,
    save_model,
)

VOCAB = SMALL_TEXT["vocab_size"]
HIDDEN = SMALL_TEXT["hidden_size"]
INTERMEDIATE = SMALL_TEXT["intermediate_size"]
HEADS, KV_HEADS, HEAD_DIM = 2, 1, 64
# The draft vocabulary of the own-head variant: half the target's, as 32000 of Llama 3's 128256.
DRAFT_VOCAB = VOCAB // 2
VARIANTS = {
    "shared_head": "no head of its own: the target's head is shared (served as EAGLE-1 is)",
    "full_vocab_own_head": (
        "a head of its own over the target's whole vocabulary (refused: vLLM compares it byte for "
        "byte with the target's head after loading)"
    ),
}


def target_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        **SMALL_TEXT,
        num_hidden_layers=3,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        tie_word_embeddings=False,
        architectures=["LlamaForCausalLM"],
    )


def draft_config(draft_vocab: int | None) -> dict:
    """The draft's config.json: a one-layer Llama config named as published EAGLE-3 drafts are
    (``LlamaForCausalLMEagle3``); ``draft_vocab_size`` where it has a vocabulary of its own."""
    config = target_config().to_dict()
    config.update(
        num_hidden_layers=1,
        architectures=["LlamaForCausalLMEagle3"],
        tie_word_embeddings=False,
        target_hidden_size=HIDDEN,
        dtype="bfloat16",
    )
    if draft_vocab is not None:
        config["draft_vocab_size"] = draft_vocab
    return config


def draft_vocabulary(seed: int, size: int):
    """Which target ids the draft may propose, sorted (so ``d2t`` keeps vLLM's id order): the
    special tokens and a seeded sample of the rest."""
    import torch

    from draft_head_fp8.tiny.common import SPECIAL_IDS

    special = sorted({int(v) for v in SPECIAL_IDS.values() if isinstance(v, int)})
    rest = [i for i in range(VOCAB) if i not in special]
    order = torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed + 7))
    chosen = sorted(special + [rest[int(i)] for i in order[: size - len(special)]])
    return torch.tensor(chosen, dtype=torch.long)


def draft_tensors(seed: int, draft_vocab: int | None, *, own_head: bool) -> dict:
    rand = Randoms(seed)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    layer = "midlayer."
    tensors = {
        f"{layer}input_layernorm.weight": rand.ones(HIDDEN),
        f"{layer}hidden_norm.weight": rand.ones(HIDDEN),
        f"{layer}post_attention_layernorm.weight": rand.ones(HIDDEN),
        f"{layer}self_attn.q_proj.weight": rand.normal(q, 2 * HIDDEN),
        f"{layer}self_attn.k_proj.weight": rand.normal(kv, 2 * HIDDEN),
        f"{layer}self_attn.v_proj.weight": rand.normal(kv, 2 * HIDDEN),
        f"{layer}self_attn.o_proj.weight": rand.normal(HIDDEN, q),
        f"{layer}mlp.gate_proj.weight": rand.normal(INTERMEDIATE, HIDDEN),
        f"{layer}mlp.up_proj.weight": rand.normal(INTERMEDIATE, HIDDEN),
        f"{layer}mlp.down_proj.weight": rand.normal(HIDDEN, INTERMEDIATE),
    }
    return tensors | eagle3_glue(rand, seed, draft_vocab, own_head=own_head)


def eagle3_glue(rand: Randoms, seed: int, draft_vocab: int | None, *, own_head: bool) -> dict:
    """What every EAGLE-3 draft holds beside its decoder layer: ``fc`` (three hidden states of
    the target, joined), ``norm``, and by variant its own ``lm_head`` (``draft_vocab`` rows, else
    the target's vocabulary) with ``d2t``/``t2d`` where its vocabulary is a subset."""
    tensors = {"fc.weight": rand.normal(HIDDEN, 3 * HIDDEN), "norm.weight": rand.ones(HIDDEN)}
    if own_head:
        rows = draft_vocab or VOCAB
        # Wider than the layers' 0.02: random logits far enough apart to pick one token each.
        tensors["lm_head.weight"] = rand.normal(rows, HIDDEN, std=0.5)
    if draft_vocab is not None and draft_vocab != VOCAB:
        tensors.update(vocabulary_tensors(draft_vocabulary(seed, draft_vocab)))
    return tensors


def decoder_layer(model, rand: Randoms, widened: tuple[str, ...]) -> dict:
    """Layer 0 of a one-layer transformers model (``model``: the target's architecture) as an
    EAGLE-3 ``midlayer``: its tensors renamed, the attention's input projections named in
    ``widened`` made to read ``2 x hidden`` (seeded, bf16: the embedding beside the fused hidden
    state), and ``hidden_norm`` added."""
    import torch

    prefix = "model.layers.0."
    layer = {
        "midlayer." + k.removeprefix(prefix): v.detach().to(torch.bfloat16).contiguous()
        for k, v in model.state_dict().items()
        if k.startswith(prefix)
    }
    for name in widened:
        key = f"midlayer.self_attn.{name}.weight"
        layer[key] = rand.normal(layer[key].shape[0], 2 * HIDDEN)
    layer["midlayer.hidden_norm.weight"] = rand.ones(HIDDEN)
    return layer


def vocabulary_tensors(ids) -> dict:
    """``d2t`` (draft id -> target id offset, what vLLM's ``compute_logits`` adds) and ``t2d``
    (which target ids the draft has; vLLM skips it) of a draft vocabulary: sorted target ids."""
    import torch

    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[ids] = True
    return {"d2t": ids - torch.arange(len(ids)), "t2d": t2d}


def write_draft(folder: Path, tokenizer_dir: Path, *, seed: int, draft_vocab: int | None,
                own_head: bool, tensors: dict | None = None,
                config: dict | None = None) -> None:  # fmt: skip
    """The draft folder: ``tensors`` (default: ``draft_tensors``' random ones; the trained pair
    passes its own, named as these), ``config`` (default ``draft_config(draft_vocab)``) and the
    tokenizer."""
    from safetensors.torch import save_file

    if tensors is None:
        tensors = draft_tensors(seed, draft_vocab, own_head=own_head)
    save_file(tensors, folder / WEIGHTS, metadata={"format": "pt"})
    config = draft_config(draft_vocab) if config is None else config
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    copy_tokenizer(tokenizer_dir, folder)


def draft_vocab_of(*, shared_head: bool, full_vocab_own_head: bool) -> int | None:
    """The draft vocabulary of a variant: none of its own (the target's head is shared), the
    target's whole vocabulary (refused), else half of it."""
    if shared_head and full_vocab_own_head:
        raise ValueError("shared_head and full_vocab_own_head are two different drafts")
    if shared_head:
        return None
    return VOCAB if full_vocab_own_head else DRAFT_VOCAB


def build_pair(out: str | os.PathLike, *, seed: int, target: Callable[[], Any],
               draft: Callable[[int | None], tuple[dict, dict]], shared_head: bool,
               full_vocab_own_head: bool) -> TinyPair:  # fmt: skip
    """``out/target`` (the transformers model ``target()`` makes, seeded) and ``out/assistant``
    (``draft(draft_vocab)``: its tensors and its config.json), sharing a tokenizer trained here.
    Refuses folders with files."""
    draft_vocab = draft_vocab_of(shared_head=shared_head, full_vocab_own_head=full_vocab_own_head)
    with new_pair(Path(out), seed=seed, vocab=VOCAB) as (pair, tok_dir):
        save_model(target(), tok_dir, pair.target)
        tensors, config = draft(draft_vocab)
        write_draft(pair.assistant, pair.target, seed=seed, draft_vocab=draft_vocab,
                    own_head=not shared_head, tensors=tensors, config=config)  # fmt: skip
    return pair


def build(
    out: str | os.PathLike,
    *,
    shared_head: bool = False,
    full_vocab_own_head: bool = False,
    seed: int = 0,
) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE-3 draft). By default the draft has
    its own head over half the target's vocabulary. Refuses folders with files."""
    from transformers import LlamaForCausalLM

    def draft(draft_vocab: int | None) -> tuple[dict, dict]:
        tensors = draft_tensors(seed, draft_vocab, own_head=not shared_head)
        return tensors, draft_config(draft_vocab)

    return build_pair(out, seed=seed, target=lambda: LlamaForCausalLM(target_config()),
                      draft=draft, shared_head=shared_head,
                      full_vocab_own_head=full_vocab_own_head)  # fmt: skip
