"""Tiny real HY V4 checkpoints with one MTP layer (family ``hy-v4-mtp``): one folder, the target
and its MTP layer together, as Tencent ships them; bf16 safetensors plus a tokenizer trained
here, built in seconds and without any network. Random weights.

The target is a transformers ``HYV4ForCausalLM`` (MLA with a q-LoRA, dense MLPs), plain: every layer
``full_attention`` (vLLM has no sparse MLA backend on a CPU), and iHC (``enable_ihc``), the output
gate and the attention sinks off (untried on this CPU: the head's share never reads them); its head
in BF16 (``enable_lm_head_fp32`` false: the float32 head is refused, variant ``fp32_head``).
transformers builds those modules whatever the config says and saves them under Tencent's names;
their tensors are left out, so the checkpoint holds what vLLM builds. Saved with one layer more than
its config says, that layer moves to ``model.mtp_layers.0.*`` (Tencent's place for it), beside the
glue vLLM's ``HYV4MTP`` loads: ``enorm``, ``hnorm``, ``eh_proj`` (``[hidden, 2 * hidden]``) and
``final_layernorm``.
"""

from __future__ import annotations

import os

from draft_head_fp8.tiny.common import SMALL_TEXT, TinyPair, build_mtp_target, mtp_glue

HIDDEN = SMALL_TEXT["hidden_size"]
LAYERS = 2  # the target's; layer LAYERS is the MTP block
VARIANTS = {
    "fp32_head": "a target whose head computes float32 logits, HY V4's default (refused)",
}
# The MLA shape vLLM's CPU attention accepts; HY V4 always has a q-LoRA.
MLA = dict(q_lora_rank=64, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=64,
           v_head_dim=64)  # fmt: skip
# What the head's share never reads, off (sparse attention, which vLLM cannot run on a CPU, is
# off through layer_types below).
OFF = dict(enable_ihc=False, gated_mla=False, learnable_sink=False)
# What transformers saves whatever the config says, for the features switched off above (the
# output gate, sinks, iHC, the sparse indexer), under the checkpoint's names.
UNUSED = (".self_attn.linear_gate.", ".learnable_sink_param", ".hc_", ".indexer.")


def config(*, fp32_head: bool):
    from transformers import HYV4Config

    layers = LAYERS + 1
    return HYV4Config(
        **SMALL_TEXT,
        **MLA,
        **OFF,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        moe_intermediate_size=64,
        n_routed_experts=4,
        num_experts_per_tok=2,
        mlp_layer_types=["dense"] * layers,
        layer_types=["full_attention"] * layers,
        enable_lm_head_fp32=fp32_head,
        tie_word_embeddings=False,
    )


def _mtp_glue(seed: int):
    mtp = "model.mtp_layers.0."
    glue = mtp_glue(
        seed,
        moves=[(f"model.layers.{LAYERS}.", mtp)],
        norms=[f"{mtp}enorm", f"{mtp}hnorm", f"{mtp}final_layernorm"],
        projection=f"{mtp}eh_proj",
        hidden=HIDDEN,
    )

    def edit(tensors: dict) -> dict:
        kept = {k: v for k, v in tensors.items() if not any(u in k for u in UNUSED)}
        # transformers saves the attention gate as linear_gate, Tencent's name, and the dense
        # MLP's gate_proj with it; Tencent's checkpoints and vLLM keep that one gate_proj.
        return glue({k.replace(".mlp.linear_gate.", ".mlp.gate_proj."): v for k, v in kept.items()})

    return edit


def build(out: str | os.PathLike, *, fp32_head: bool = False, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the target with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import HYV4ForCausalLM

    torch.manual_seed(seed)
    model = HYV4ForCausalLM(config(fp32_head=fp32_head))
    per_layer = {k: getattr(model.config, k)[:LAYERS]
                 for k in ("mlp_layer_types", "layer_types", "indexer_types")}  # fmt: skip
    return build_mtp_target(
        out,
        model,
        _mtp_glue(seed),
        architectures=["HYV4ForCausalLM"],
        num_hidden_layers=LAYERS,
        num_nextn_predict_layers=1,
        **per_layer,
    )
