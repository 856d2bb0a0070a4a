"""Tiny real Bailing MoE V2.5 checkpoints (Ling/Ring 2.5) with one MTP layer (family
``bailing-v25-mtp``): one folder, the target and its MTP layer together, as inclusionAI ships
them; bf16 safetensors plus a tokenizer trained here, built in seconds and without any network.
Random weights.

transformers has no Bailing model: the tensors are a transformers ``DeepseekV3ForCausalLM``'s
(MLA without a q-LoRA, a dense first layer, then MoE with a shared expert and a sigmoid router
with a correction bias: the blocks vLLM's Bailing classes build), saved and renamed to Bailing's
names (``model.word_embeddings``, ``attention.*``, the output projection ``attention.dense``).
Saved with one layer more than its config says, that layer is the MTP layer's decoder block at
``model.layers.{N}``, beside the glue vLLM's ``BailingMoeV25MTPModel`` loads: ``enorm``,
``hnorm``, ``eh_proj`` (``[hidden, 2 * hidden]``) and ``final_layernorm``; its head is the
target's ``lm_head.weight`` (Bailing checkpoints keep no copy).

The config is loaded as real Bailing checkpoints load theirs: with remote code, a configuration
module in the folder named by ``auto_map`` (here a bare ``PretrainedConfig`` of model type
``bailing_hybrid`` that keeps every key), so vLLM sees the model type a real checkpoint has and
no default of another model's config class (transformers has no Bailing class; DeepSeek's and
Kimi Linear's, the model types that turn MLA on without remote code, overwrite ``head_dim``,
which the tiny target needs). The engine starts with ``trust_remote_code`` (the tests' engine
runs of this family pass it, ``tests/engine_support.py``). Every key vLLM's Bailing classes
read is written out.

Kept plain where vLLM's CPU engine cannot run a real Bailing target: vLLM 0.34 sizes a hybrid
MLA target's KV blocks to a multiple of 128 tokens whenever its linear-attention state takes
memory (``_align_hybrid_block_size``), and its CPU MLA takes only 16-token blocks ("Aligned KV
cache block size 128 is not supported by attention backend(s): CPU_MLA", measured flag off with
``head_dim`` 64). So every layer is full attention (``layer_group_size`` 1, vLLM's rule for no
linear layer) and the linear-attention state is sized to nothing (``head_dim`` 0: it sizes only
that state; MLA's dims are its own), which vLLM's alignment skips. The head's share never reads
either; the MTP layer is MLA and MoE in every Bailing checkpoint. MLA in the one shape vLLM's
CPU attention takes (``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    TinyPair,
    build_mtp_target,
    mtp_glue,
)

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 1  # the target's (dense); layer LAYERS is the MTP block (MoE)
VARIANTS: dict[str, str] = {}
MLA = dict(q_lora_rank=None, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=64,
           v_head_dim=64, num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
# Bailing's MoE keys at their smallest: four routed experts (top-2) and a shared one, one group,
# the sigmoid router with its correction bias.
MOE = dict(num_experts=4, num_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64,
           moe_shared_expert_intermediate_size=64, first_k_dense_replace=1, n_group=1,
           topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=True)  # fmt: skip
# The configuration module the folder ships (auto_map), as Bailing's own checkpoints do.
CONFIG_MODULE = '''"""A tiny Bailing checkpoint's configuration (draft_head_fp8.tiny)."""

from transformers import PretrainedConfig


class {name}(PretrainedConfig):
    model_type = "bailing_hybrid"
'''


def bailing_config(architecture: str, **extra: Any) -> dict[str, Any]:
    """config.json of a Bailing target with one MTP layer, every key vLLM's classes read."""
    return {
        "architectures": [architecture],
        "model_type": "bailing_hybrid",
        **SMALL_TEXT,
        **MLA,
        **MOE,
        "num_hidden_layers": LAYERS,
        "num_nextn_predict_layers": 1,
        "layer_group_size": 1,
        "head_dim": 0,  # the linear-attention state's (see above)
        "hidden_act": "silu",
        "use_bias": False,
        "use_qkv_bias": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **extra,
    }


def deepseek_blocks():
    """A transformers model whose tensors are the blocks of a Bailing target and its MTP layer."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    bailing_only = ("num_experts", "num_shared_experts", "moe_shared_expert_intermediate_size")
    config = DeepseekV3Config(
        **SMALL_TEXT,
        **MLA,
        **{k: v for k, v in MOE.items() if k not in bailing_only},
        n_routed_experts=MOE["num_experts"],
        n_shared_experts=MOE["num_shared_experts"],
        num_hidden_layers=LAYERS + 1,
        topk_method="noaux_tc",
        rope_scaling=None,
        tie_word_embeddings=False,
    )
    return DeepseekV3ForCausalLM(config)


def bailing_names(bias: str, seed: int):
    """An edit: DeepSeek's tensor names to Bailing's (the router's correction bias as ``bias``),
    then the MTP glue beside layer ``LAYERS``."""
    mtp = f"model.layers.{LAYERS}."
    glue = mtp_glue(
        seed,
        moves=[],
        norms=[f"{mtp}enorm", f"{mtp}hnorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}eh_proj",
        hidden=HIDDEN,
    )

    def rename(name: str) -> str:
        name = name.replace("model.embed_tokens.", "model.word_embeddings.")
        name = name.replace(".self_attn.o_proj.", ".attention.dense.")
        name = name.replace(".self_attn.", ".attention.")
        return name.replace(".mlp.gate.e_score_correction_bias", f".mlp.gate.{bias}")

    def edit(tensors: dict) -> dict:
        return glue({rename(k): v for k, v in tensors.items()})

    return edit


def write_config(folder: Path, config: dict[str, Any], module: str, name: str) -> None:
    """config.json, and the configuration module ``module`` defining ``name`` it maps to."""
    (folder / f"{module}.py").write_text(CONFIG_MODULE.format(name=name))
    config = {**config, "auto_map": {"AutoConfig": f"{module}.{name}"}}
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_bailing(
    out: str | os.PathLike, config: dict[str, Any], *, bias: str, module: tuple[str, str], seed: int
) -> TinyPair:
    """Write ``out/target``: DeepSeek-V3 blocks under Bailing's names, with ``config`` and its
    configuration ``module`` (file stem, class name)."""
    import torch

    torch.manual_seed(seed)
    pair = build_mtp_target(out, deepseek_blocks(), bailing_names(bias, seed))
    write_config(pair.target, config, *module)
    return pair


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    config = bailing_config(
        "BailingMoeV2_5ForCausalLM",
        score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        router_dtype="fp32",
    )
    # V2.5's loaders read the bias under DeepSeek's name and rename it themselves.
    module = ("configuration_bailing_moe_v2_5", "BailingMoeV2_5Config")
    return build_bailing(out, config, bias="e_score_correction_bias", module=module, seed=seed)
