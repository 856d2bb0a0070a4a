"""Tiny real MiMo-V2-Omni checkpoints with one MTP layer (family ``mimo-v2-omni-mtp``): the
MiMo-V2-Flash language model and MTP layer of ``tiny/mimo_v2_mtp.py``, tensors and names
unchanged (vLLM's ``MiMoV2OmniForCausalLM`` maps ``model.*`` and ``lm_head.*`` to its language
model; ``MiMoV2OmniMTP`` loads MiMo-V2's names), under the omni architecture, its config naming a
vision tower (``vision_config``, read by vLLM's ``Mimo_VLVisionConfig``: one small block, no
attention sinks, its output the language model's width) that the text-only engine constructs
and drops without loading (``language_model_only``), so no tower weights ship. Random weights.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny import mimo_v2_mtp
from draft_head_fp8.tiny.common import SMALL_VISION, TinyPair, update_config

VARIANTS: dict[str, str] = {}
# The smallest tower vLLM's MiMo-V2-Omni constructs: one block, no sinks, merged to the
# language model's hidden size.
VISION = dict(
    SMALL_VISION, num_key_value_heads=2, qk_channels=32, kv_channels=32,
    out_hidden_size=mimo_v2_mtp.HIDDEN, fullatt_block_indexes=[0], use_sink=False,
)  # fmt: skip


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    pair = mimo_v2_mtp.build(out, seed=seed)
    update_config(pair.target, architectures=["MiMoV2OmniForCausalLM"], vision_config=VISION)
    return pair
