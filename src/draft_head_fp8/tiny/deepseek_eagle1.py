"""Tiny real DeepSeek-V3 EAGLE-1 checkpoints (family ``deepseek-eagle1``): the DeepSeek-V3 target of
``tiny/deepseek_eagle3.py`` (MLA, a dense first layer, then MoE; untied head), and an EAGLE-1
draft folder as vLLM's ``EagleDeepseekV3ForCausalLM`` reads it: one DeepSeek-V3 MoE decoder layer
``layers.0.*`` (layer 1 of a two-layer transformers ``DeepseekV3ForCausalLM``: vLLM builds the
draft's layer after the target's, past ``first_k_dense_replace``, so as MoE), ``enorm``,
``hnorm``, ``fc`` (``[hidden, 2 * hidden]``) and ``norm``; no embedding and no head (vLLM shares
both from the target). Its config is a ``deepseek_v3`` one: vLLM makes it ``DeepSeekMTPModel``,
and ``method="eagle"`` ``EagleDeepSeekMTPModel``. Random weights, bf16
(``llama_eagle1.build_eagle1_pair``).
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import Randoms, TinyPair, move_layer
from draft_head_fp8.tiny.deepseek_eagle3 import target_config
from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, build_eagle1_pair

VARIANTS: dict[str, str] = {}


def draft_config():
    """Two layers of the target's config (layer 1 is MoE), saved, then cut to that one."""
    config = target_config()
    config.num_hidden_layers = 2
    return config


def _draft_tensors(rand: Randoms):
    def edit(tensors: dict) -> dict:
        kept = {k: v for k, v in tensors.items() if k.startswith("model.layers.1.")}
        kept = move_layer(kept, "model.layers.1.", "layers.0.")
        kept["norm.weight"] = tensors["model.norm.weight"]
        kept["fc.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
        kept["enorm.weight"] = rand.ones(HIDDEN)
        kept["hnorm.weight"] = rand.ones(HIDDEN)
        return kept

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import DeepseekV3ForCausalLM

    return build_eagle1_pair(
        out, seed=seed, target=lambda: DeepseekV3ForCausalLM(target_config()),
        draft=lambda: DeepseekV3ForCausalLM(draft_config()), edit=_draft_tensors(Randoms(seed)),
        num_hidden_layers=1,
    )  # fmt: skip
