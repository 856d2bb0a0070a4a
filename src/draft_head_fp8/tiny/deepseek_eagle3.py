"""Tiny real DeepSeek EAGLE-3 checkpoints (family ``deepseek-eagle3``): a DeepSeek-V3 target (MLA
attention, a dense first layer, then MoE with a shared expert and ``noaux_tc`` routing; untied
head; three layers, no MTP layer), and an EAGLE-3 draft folder as vLLM's
``Eagle3DeepseekV2ForCausalLM.load_weights`` reads it: ``midlayer.*`` (layer 0 of a one-layer,
dense transformers ``DeepseekV2ForCausalLM``: MLA with a query LoRA, ``q_a_proj`` and
``kv_a_proj_with_mqa`` reading ``2 x hidden``, ``hidden_norm`` added), ``fc``, ``norm`` and the
head by variant, as ``tiny/llama_eagle3.py`` writes them (``build_pair``).

The draft's config is a ``deepseek_v2`` one named ``Eagle3DeepseekV3ForCausalLM``: vLLM rewrites
any ``deepseek_v3`` draft config to its MTP drafter. It names the target's auxiliary layers
(``eagle_aux_hidden_state_layer_ids``: the inputs of layers 1 and 2 and the last hidden state):
vLLM's default ``(2, n // 2, n - 3)`` would ask DeepSeek's model for layer 0's input, which it
cannot give (no residual yet). vLLM's MLA on CPU accepts only ``kv_lora_rank=512`` with
``qk_rope_head_dim=64``, and the router bias needs ``topk_method="noaux_tc"``.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny import llama_eagle3 as eagle3
from draft_head_fp8.tiny.common import DEEPSEEK_STYLE_MOE, SMALL_TEXT, Randoms, TinyPair

ARCHITECTURE = "Eagle3DeepseekV3ForCausalLM"
LAYERS = 3
AUX_LAYERS = [1, 2, LAYERS]
Q_LORA_RANK = 64
VARIANTS = eagle3.VARIANTS
MLA = dict(
    num_attention_heads=2,
    num_key_value_heads=2,
    kv_lora_rank=512,
    q_lora_rank=None,
    qk_rope_head_dim=64,
    qk_nope_head_dim=64,
    v_head_dim=64,
    rope_scaling=None,
    tie_word_embeddings=False,
)


def target_config():
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        **SMALL_TEXT, **DEEPSEEK_STYLE_MOE, **MLA, num_hidden_layers=LAYERS,
        topk_method="noaux_tc", architectures=["DeepseekV3ForCausalLM"],
    )  # fmt: skip


def layer_config():
    """One dense DeepSeek-V2 layer with the target's MLA dimensions and a query LoRA (vLLM's
    EAGLE-3 loader fuses ``q_a_proj`` with ``kv_a_proj_with_mqa``, so it has none without one):
    the draft's decoder layer."""
    from transformers import DeepseekV2Config

    return DeepseekV2Config(
        **SMALL_TEXT, **DEEPSEEK_STYLE_MOE, **{**MLA, "q_lora_rank": Q_LORA_RANK},
        num_hidden_layers=1, architectures=[ARCHITECTURE],
    )  # fmt: skip


def draft_config(draft_vocab: int | None) -> dict:
    draft = layer_config().to_dict()
    draft.update(
        target_hidden_size=eagle3.HIDDEN,
        eagle_aux_hidden_state_layer_ids=AUX_LAYERS,
        dtype="bfloat16",
    )
    if draft_vocab is not None:
        draft["draft_vocab_size"] = draft_vocab
    return draft


def draft(seed: int, draft_vocab: int | None, *, own_head: bool) -> tuple[dict, dict]:
    from transformers import DeepseekV2ForCausalLM

    rand = Randoms(seed)
    model = DeepseekV2ForCausalLM(layer_config())
    layer = eagle3.decoder_layer(model, rand, ("q_a_proj", "kv_a_proj_with_mqa"))
    tensors = layer | eagle3.eagle3_glue(rand, seed, draft_vocab, own_head=own_head)
    return tensors, draft_config(draft_vocab)


def build(
    out: str | os.PathLike,
    *,
    shared_head: bool = False,
    full_vocab_own_head: bool = False,
    seed: int = 0,
) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE-3 draft). By default the draft has
    its own head over half the target's vocabulary. Refuses folders with files."""
    from transformers import DeepseekV3ForCausalLM

    return eagle3.build_pair(
        out, seed=seed, target=lambda: DeepseekV3ForCausalLM(target_config()),
        draft=lambda vocab: draft(seed, vocab, own_head=not shared_head),
        shared_head=shared_head, full_vocab_own_head=full_vocab_own_head,
    )  # fmt: skip
