"""Tiny real Intern-S2-Mobius checkpoints with one MTP layer (family ``interns2-mobius-mtp``): one
folder, the target and its MTP layer together, as the Intern-S2 checkpoints ship them; bf16
safetensors plus a tokenizer trained here, built in seconds and without any network. Random
weights.

transformers has no Intern-S2 model: the tensors are a transformers ``Qwen3_5MoeForCausalLM``'s
(Qwen3.5-MoE's tiny shape: a gated-delta-net layer, then gated full attention, MoE with a shared
expert; the blocks vLLM's ``InternS2MobiusForCausalLM`` builds), saved with one full-attention
layer more than its config says and renamed to Mobius's layout: the language model under
``model.language_model.``, each layer's shared expert kept in its ``mlp``, the routed experts in
one bank, ``model.language_model.meta_mlp.0`` (Mobius's MoE banks are shared by the layers,
``layer % num_blocks``: with ``num_blocks`` 1 both layers route through layer 0's experts; layer
1's are dropped), and the extra layer at ``mtp.layers.0`` beside the glue vLLM's
``Qwen3_5MoeMTP`` loads (``mtp.fc``, ``mtp.pre_fc_norm_*``, ``mtp.norm``; Qwen3.5-MoE's MTP
layer, its experts counted by ``mtp_num_experts``); the head is the target's ``lm_head.weight``.

The config is loaded as the real checkpoints load theirs: with remote code, a configuration
module in the folder named by ``auto_map``, model type ``interns2_mobius``, the only way vLLM
drafts with ``InternS2MobiusMTP`` (its draft-config rewrite names it for that type alone, and
neither transformers nor vLLM has a class for it). That module is the smallest honest one, not
Intern's: a ``PretrainedConfig`` whose ``text_config`` and ``vision_config`` are sub-configs
(objects, as vLLM's rewrite sets ``text_config.model_type`` and Qwen3-VL's code reads
``vision_config``) keeping every key written; no defaults, no validation, so every key vLLM
reads is written out. The engine starts with ``trust_remote_code`` and text only
(``language_model_only``: no vision tower is built, so its tiny config is never exercised; no
processor ships). No M-RoPE section: text-only positions are the same on its three axes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from draft_head_fp8.tiny.common import SMALL_VISION, TinyPair, build_mtp_target
from draft_head_fp8.tiny.qwen3_next_mtp import GDN_MOE, LAYER_TYPES, mtp_glue

HIDDEN = GDN_MOE["hidden_size"]
VARIANTS: dict[str, str] = {}
MODULE = "configuration_interns2_mobius"
# Ids the target's config names for its vision tokens (Qwen3-VL's keys); never in a text prompt.
VISION_TOKENS = dict(image_token_id=2044, video_token_id=2045, vision_start_token_id=2046,
                     vision_end_token_id=2047)  # fmt: skip
# The configuration module the folder ships (auto_map), as Intern-S2's own checkpoints do.
CONFIG_MODULE = '''"""A tiny Intern-S2-Mobius checkpoint's configuration (draft_head_fp8.tiny)."""

from transformers import PretrainedConfig


class InternS2MobiusTextConfig(PretrainedConfig):
    model_type = "interns2_mobius_text"
    base_config_key = "text_config"


class InternS2MobiusVisionConfig(PretrainedConfig):
    model_type = "interns2_mobius_vision"
    base_config_key = "vision_config"


def _sub(cls, value):
    return value if isinstance(value, cls) else cls(**(value or {}))


class InternS2MobiusConfig(PretrainedConfig):
    model_type = "interns2_mobius"
    sub_configs = {
        "text_config": InternS2MobiusTextConfig,
        "vision_config": InternS2MobiusVisionConfig,
    }

    def __init__(self, text_config=None, vision_config=None, **kwargs):
        self.text_config = _sub(InternS2MobiusTextConfig, text_config)
        self.vision_config = _sub(InternS2MobiusVisionConfig, vision_config)
        super().__init__(**kwargs)
'''


def text_config() -> dict[str, Any]:
    """The language model's keys, Qwen3.5-MoE's plus Mobius's: the shared MoE banks and the MTP
    layer's own expert counts (what vLLM's rewrite reads)."""
    from draft_head_fp8.tiny.qwen3_5_mtp import config

    text = config(tied=False).to_dict()
    for key in ("architectures", "transformers_version", "id2label", "label2id", "dtype"):
        text.pop(key, None)
    return {
        **text,
        "model_type": "interns2_mobius_text",
        "num_hidden_layers": len(LAYER_TYPES),
        "layer_types": LAYER_TYPES,
        "num_blocks": 1,
        "mtp_num_hidden_layers": 1,
        "mtp_num_experts": GDN_MOE["num_experts"],
        "mtp_num_experts_per_tok": GDN_MOE["num_experts_per_tok"],
        "rope_theta": text["rope_parameters"]["rope_theta"],
    }


def vision_config() -> dict[str, Any]:
    """Qwen3.5-MoE's vision keys at their smallest (Mobius's tower is Qwen3-VL's, which vLLM
    constructs from them even text only, then skips)."""
    from transformers import Qwen3_5MoeVisionConfig

    vision = Qwen3_5MoeVisionConfig(**SMALL_VISION, out_hidden_size=HIDDEN).to_dict()
    for key in ("architectures", "transformers_version", "id2label", "label2id", "dtype"):
        vision.pop(key, None)
    return {**vision, "model_type": "interns2_mobius_vision"}


def mobius_layout(seed: int):
    """An edit: the MTP layer and its glue (Qwen3.5's), the routed experts of layer 0 as the one
    shared bank, the language model under ``model.language_model.``."""
    glue = mtp_glue(seed)

    def rename(name: str) -> str | None:
        if ".mlp.gate." in name or ".mlp.experts." in name:
            if not name.startswith("model.layers.0."):
                return None  # a later layer routes through the shared bank
            name = name.replace("model.layers.0.mlp.", "model.meta_mlp.0.")
        return name.replace("model.", "model.language_model.", 1)

    def edit(tensors: dict) -> dict:
        tensors = glue(tensors)
        kept = {k: v for k, v in tensors.items() if k.startswith(("mtp.", "lm_head."))}
        for name, tensor in tensors.items():
            if name not in kept and (new := rename(name)) is not None:
                kept[new] = tensor
        return kept

    return edit


def write_config(folder: Path) -> None:
    """config.json of the target (Mobius's keys, every one vLLM reads) and the configuration
    module it maps to."""
    (folder / f"{MODULE}.py").write_text(CONFIG_MODULE)
    config = {
        "architectures": ["InternS2MobiusForConditionalGeneration"],
        "model_type": "interns2_mobius",
        "auto_map": {"AutoConfig": f"{MODULE}.InternS2MobiusConfig"},
        "text_config": text_config(),
        "vision_config": vision_config(),
        **VISION_TOKENS,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    from draft_head_fp8.tiny.qwen3_5_mtp import config

    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(config(tied=False))
    pair = build_mtp_target(out, model, mobius_layout(seed))
    write_config(pair.target)
    return pair
