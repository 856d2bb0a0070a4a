"""Tiny real Bailing MoE V3 checkpoints (Ling 3.0) with one MTP layer (family
``bailing-v3-mtp``): one folder, the target and its MTP layer together, as inclusionAI ships
them; bf16 safetensors plus a tokenizer trained here, built in seconds and without any network.
Random weights.

Built as V2.5's (``tiny/bailing_v25_mtp.py``: DeepSeek-V3 blocks under Bailing's names, the
MTP glue beside layer ``N``, the configuration loaded with remote code, model type
``bailing_hybrid``), with what V3 reads differently: the architecture
``BailingMoeV3ForCausalLM`` (vLLM rewrites the drafter's config to ``bailing_hybrid_v3_mtp`` by
it), the router's correction bias as ``mlp.gate.expert_bias`` (V3's target loader reads no other
name) and the Kimi Delta Attention state's convolution width (``short_conv_kernel_size``).
Kept plain as V2.5's, for the same reason (vLLM 0.34's CPU engine aligns a hybrid MLA target's
blocks to 128 tokens where its CPU MLA takes 16): every layer full attention
(``layer_group_size`` 1: no KDA layer, whose Triton ops run on every step) and the KDA state
sized to nothing (``head_dim`` 0); no attention output gate (``g_proj``: V3's MLA builds none
where ``gated_attention_proj_granularity_type`` is unset).
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.bailing_v25_mtp import bailing_config, build_bailing
from draft_head_fp8.tiny.common import TinyPair

VARIANTS: dict[str, str] = {}


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    config = bailing_config("BailingMoeV3ForCausalLM", short_conv_kernel_size=4)
    module = ("configuration_bailing_moe_v3", "BailingMoeV3Config")
    return build_bailing(out, config, bias="expert_bias", module=module, seed=seed)
