"""Tiny real Step 3.5 checkpoints with two MTP layers (family ``step3p5-mtp``): one folder, the
target and its MTP layers together, as StepFun ships them; bf16 safetensors plus a tokenizer
trained here, built in seconds and without any network. Random weights.

The target is transformers' Step 3.5/3.7 text model (``Step3p7TextModel`` with the
``Step3p7TextConfig`` vLLM reads for model type ``step3p5``), saved under StepFun's names (what
vLLM's ``Step3p5ForCausalLM`` loads): ``model.*``, its MoE as ``moe.{gate,router_bias}`` and the
experts stacked per projection, the shared expert as ``share_expert``. Kept plain: full attention
everywhere (no sliding layers), no head-wise attention gate (transformers builds ``g_proj``
whatever the config says; its tensors are left out), no SwiGLU limits. vLLM's target class needs
one MoE layer (its second); the MTP layers are dense. Saved with two layers more than its config
says, those stay at ``model.layers.{2,3}.*`` (StepFun's place for them), beside the glue vLLM's
``Step3p5MTP`` loads: ``enorm``, ``hnorm``, ``eh_proj`` and each layer's ``shared_head`` (its norm
and its head, ``shared_head.output``). The two MTP heads and the target's are drawn apart, so
each draft step's picks can be told from the others'.
"""

from __future__ import annotations

import os
from pathlib import Path

from draft_head_fp8.tiny.common import SMALL_TEXT, Randoms, TinyPair, build_mtp_target

HIDDEN = SMALL_TEXT["hidden_size"]
VOCAB = SMALL_TEXT["vocab_size"]
LAYERS = 2  # the target's; layers LAYERS and LAYERS + 1 are the MTP blocks
MTP_LAYERS = 2
VARIANTS: dict[str, str] = {}
MOE = dict(moe_intermediate_size=64, n_routed_experts=4, num_experts_per_tok=2,
           share_expert_dim=64)  # fmt: skip
# What vLLM's MoE block asserts or reads that transformers' config does not hold.
VLLM_MOE = dict(use_moe_router_bias=True, need_fp32_gate=True, norm_expert_weight=True)


def config():
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig

    layers = LAYERS + MTP_LAYERS
    return Step3p7TextConfig(
        **SMALL_TEXT,
        **MOE,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,  # vLLM's Step 3.5 serves grouped-query attention only
        head_dim=64,
        mlp_layer_types=["dense", "sparse", "dense", "dense"],
        layer_types=["full_attention"] * layers,
        tie_word_embeddings=False,
    )


def _stepfun_names(tensors: dict) -> dict:
    """transformers' names made StepFun's, as vLLM reads them (transformers' conversion mapping
    for step3p7, backwards): the MoE's router and stacked experts, the shared expert."""
    out = {}
    for name, tensor in tensors.items():
        if ".self_attn.g_proj." in name:
            continue  # the head-wise gate, off (vLLM's use_head_wise_attn_gate)
        name = "model." + name
        if name.endswith(".mlp.experts.gate_up_proj"):
            gate, up = tensor.chunk(2, dim=1)
            base = name.removesuffix("mlp.experts.gate_up_proj")
            out[f"{base}moe.gate_proj.weight"], out[f"{base}moe.up_proj.weight"] = gate, up
            continue
        name = (
            name.replace(".mlp.experts.down_proj", ".moe.down_proj.weight")
            .replace(".mlp.gate.e_score_correction_bias", ".moe.router_bias")
            .replace(".mlp.gate.weight", ".moe.gate.weight")
            .replace(".mlp.shared_experts.", ".share_expert.")
        )
        out[name] = tensor
    return out


def _glue(seed: int):
    rand = Randoms(seed)

    def edit(tensors: dict) -> dict:
        tensors = _stepfun_names(tensors)
        tensors["lm_head.weight"] = rand.normal(VOCAB, HIDDEN)
        for layer in range(LAYERS, LAYERS + MTP_LAYERS):
            mtp = f"model.layers.{layer}."
            for norm in ("enorm", "hnorm", "shared_head.norm"):
                tensors[f"{mtp}{norm}.weight"] = rand.zeros(HIDDEN)  # vLLM adds 1 to these norms
            tensors[f"{mtp}eh_proj.weight"] = rand.normal(HIDDEN, 2 * HIDDEN)
            tensors[f"{mtp}shared_head.output.weight"] = rand.normal(VOCAB, HIDDEN)
        return tensors

    return edit


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its two MTP layers). Refuses a folder with files."""
    import torch
    from transformers.models.step3p7.modeling_step3p7 import Step3p7TextModel

    torch.manual_seed(seed)
    model = Step3p7TextModel(config())
    pair = build_mtp_target(
        Path(out),
        model,
        _glue(seed),
        architectures=["Step3p5ForCausalLM"],
        model_type="step3p5",
        num_hidden_layers=LAYERS,
        num_nextn_predict_layers=MTP_LAYERS,
        layer_types=["full_attention"] * LAYERS,
        mtp_layer_types=["full_attention"] * MTP_LAYERS,
        mlp_layer_types=["dense", "sparse"],
        mtp_mlp_layer_types=["dense"] * MTP_LAYERS,
        # No per-layer overrides (no sliding layers): transformers saves {} for that, which makes
        # the config heterogeneous over the target's layers only, and vLLM's MTP layers then
        # index past it (IndexError, flag off too); null says there are none.
        per_layer_config=None,
        **VLLM_MOE,
    )
    return pair
