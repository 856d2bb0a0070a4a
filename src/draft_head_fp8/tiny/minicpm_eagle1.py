"""Tiny real MiniCPM EAGLE-1 checkpoints (family ``minicpm-eagle1``): a MiniCPM target (a Llama
model's weights under a ``llama`` config that names ``MiniCPMForCausalLM`` and carries MiniCPM's
``scale_emb``, ``scale_depth`` and ``dim_model_base``: MiniCPM's own config class is remote code)
with an untied head, and an EAGLE-1 draft folder as vLLM's ``EagleMiniCPMModel.load_weights``
reads it: ``model.fc.weight``, ``model.input_norm1``/``input_norm2``, one decoder layer
``model.eagle_layers.0.*`` and ``model.norm.weight``; no embedding and no head (vLLM shares both
from the target). Saved as transformers writes a one-layer ``LlamaForCausalLM``, then cut
(``llama_eagle1.build_eagle1_pair``). Random weights, bf16.

The width scale is ``hidden_size / dim_model_base`` = 2 here: vLLM's drafter divides its hidden
states by it before the head.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import Randoms, TinyPair, move_layer
from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, build_eagle1_pair
from draft_head_fp8.tiny.llama_eagle1 import config as llama_config

VARIANTS: dict[str, str] = {}
ARCHITECTURE = "MiniCPMForCausalLM"
SCALES = dict(scale_emb=12, scale_depth=1.4, dim_model_base=HIDDEN // 2)


def config(layers: int):
    """A Llama config of MiniCPM's architecture, with MiniCPM's scales."""
    model = llama_config(layers)
    model.update({"architectures": [ARCHITECTURE], **SCALES})
    return model


def _draft_tensors(rand: Randoms):
    def edit(tensors: dict) -> dict:
        layer = ("model.layers.0.", "model.norm.")
        kept = {k: v for k, v in tensors.items() if k.startswith(layer)}
        kept = move_layer(kept, "model.layers.0.", "model.eagle_layers.0.")
        kept["model.fc.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
        kept["model.input_norm1.weight"] = rand.ones(HIDDEN)
        kept["model.input_norm2.weight"] = rand.ones(HIDDEN)
        return kept

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import LlamaForCausalLM

    return build_eagle1_pair(
        out, seed=seed, target=lambda: LlamaForCausalLM(config(2)),
        draft=lambda: LlamaForCausalLM(config(1)), edit=_draft_tensors(Randoms(seed)),
        # transformers saves the class it ran (Llama's) as the architecture.
        target_changes={"architectures": [ARCHITECTURE]}, architectures=[ARCHITECTURE],
    )  # fmt: skip
