"""Tiny real Mistral Large 3 EAGLE-1 checkpoints (family ``mistral-large3-eagle1``), in Hugging
Face's format: the DeepSeek-V3 target of ``tiny/deepseek_eagle3.py`` (MLA, a dense first layer,
then MoE; untied head) named ``MistralLarge3ForCausalLM`` (Mistral Large 3 is DeepSeek-V3's
architecture; vLLM's class for it is DeepSeek-V3's with Mistral's weight names mapped, and Hugging
Face names pass through unchanged), and an EAGLE-1 draft folder as vLLM's
``EagleMistralLarge3ForCausalLM`` reads it: one dense DeepSeek-V3 decoder layer
``model.layers.0.*`` (vLLM builds the draft's layer dense: it moves ``first_k_dense_replace``
past the target's layers), ``model.norm.weight`` and ``model.fc.weight`` (``[hidden, 2 *
hidden]``); no embedding and no head (vLLM shares both from the target). Its config is the
target's kind (``deepseek_v3``, ``MistralLarge3ForCausalLM``), cut to one layer. Random weights,
bf16 (``llama_eagle1.build_eagle1_pair``).
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import Randoms, TinyPair
from draft_head_fp8.tiny.deepseek_eagle3 import target_config
from draft_head_fp8.tiny.llama_eagle1 import HIDDEN, build_eagle1_pair
from draft_head_fp8.tiny.mistral_eagle1 import draft_tensors  # layer 0, the final norm, fc

VARIANTS: dict[str, str] = {}
ARCHITECTURE = "MistralLarge3ForCausalLM"


def draft_config():
    """One layer of the target's config: layer 0, dense (``first_k_dense_replace`` is 1)."""
    config = target_config()
    config.num_hidden_layers = 1
    return config


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` and ``out/assistant`` (the EAGLE draft). Refuses folders with files."""
    from transformers import DeepseekV3ForCausalLM

    return build_eagle1_pair(
        out, seed=seed, target=lambda: DeepseekV3ForCausalLM(target_config()),
        draft=lambda: DeepseekV3ForCausalLM(draft_config()),
        edit=draft_tensors(Randoms(seed).normal(HIDDEN, 2 * HIDDEN)),
        target_changes={"architectures": [ARCHITECTURE]},
        num_hidden_layers=1, architectures=[ARCHITECTURE],
    )  # fmt: skip
