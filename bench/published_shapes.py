"""Header-only checkpoints in the published shapes of real targets and their drafters, for
``bench/estimate_table.py``: a config.json with the published config fields and one
model.safetensors holding only its header (no weight: offsets point past the end of the file),
its tensors named and shaped as in the published checkpoint, so that ``check --estimate`` counts
the bytes a real decode step reads. One file per checkpoint where the real ones are sharded:
the estimate sums headers, so the split does not matter.

Where the shapes come from (the config.json of each Hugging Face repository; cross-checked
against transformers 5.19's config defaults, vLLM 0.32's model files and Megatron argument
lists in THUDM/slime's scripts/models/):
- Qwen3.5-35B-A3B (Qwen/Qwen3.5-35B-A3B, text_config): 40 layers (every 4th full attention,
  the rest gated delta-net), hidden 2048, 16 query / 2 KV heads of 256 with an output gate,
  linear attention 16 key / 32 value heads of 128 (conv 4), 256 experts of 512 top-8 plus a
  shared expert of 512, vocab 248320, untied, mtp_num_hidden_layers 1. Written as the text
  model (Qwen3_5MoeForCausalLM, text fields at the top): the published checkpoint also holds a
  27-block vision tower (``model.visual.*``), left out here.
- Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct): 48 layers (every 4th full attention),
  hidden 2048, the same attention and linear-attention heads, 512 experts of 512 top-10 plus a
  shared expert of 512, vocab 151936, untied; one MTP layer (``mtp.*``).
- DeepSeek-V3 (deepseek-ai/DeepSeek-V3): 61 layers, the first 3 dense (18432), then 256
  experts of 2048 top-8 plus one shared; MLA (128 heads, q_lora 1536, kv_lora 512, nope 128,
  rope 64, v 128), hidden 7168, vocab 129280, untied, num_nextn_predict_layers 1
  (``model.layers.61.*``). Weights FP8 (e4m3) with a 128 x 128 block scale
  (``weight_scale_inv``, F32) as published; embeddings, head, norms, router and the MTP glue
  (``eh_proj``, ``shared_head``) BF16.
- GLM-4.5-Air (zai-org/GLM-4.5-Air): 46 layers, the first dense (10944), then 128 experts of
  1408 top-8 plus one shared; 96 query / 8 KV heads of 128 with q/k/v bias, hidden 4096,
  vocab 151552, untied, num_nextn_predict_layers 1 (``model.layers.46.*``). BF16.
- MiMo-7B (XiaomiMiMo/MiMo-7B-RL): 36 Qwen2-style layers, hidden 4096, 11008, 32 query / 8 KV
  heads with q/k/v bias, vocab 151680, untied, num_nextn_predict_layers 1
  (``model.mtp_layers.0.*``). BF16.
- Llama 3.1 8B (meta-llama/Llama-3.1-8B-Instruct): 32 layers, hidden 4096, 14336, 32 query /
  8 KV heads, vocab 128256, untied. Its EAGLE-1 draft (as yuhuili/EAGLE-LLaMA3.1-Instruct-8B
  ships it, a LlamaForCausalLM config that vLLM names EagleLlamaForCausalLM): one decoder layer
  without its input norm and ``fc`` [4096, 8192]; no embedding and no head (vLLM shares the
  target's).
- Llama 3.1 8B + EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): the draft config as SpecForge
  ships it (configs/llama3-8B-eagle3.json) and as copies of the published one show it
  (jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B: "copied from yuhuili/... with the
  architecture in config.json modified to LlamaForCausalLMEagle3"): one layer, hidden 4096,
  14336, 32 query / 8 KV heads, vocab 128256, draft_vocab_size 32000, untied, float16 (served
  BF16: the same two bytes). The target: the Llama 3.1 8B above.
- Llama 3.3 70B + EAGLE-3 (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B): the target
  (meta-llama/Llama-3.3-70B-Instruct) 80 layers, hidden 8192, 28672, 64 query / 8 KV heads of
  128, vocab 128256, untied; the draft as SpecForge's configs/llama3-70B-ealge3.json states a
  Llama 3 70B EAGLE-3 draft: one layer of the target's width (8192, 28672, 64 / 8 heads of
  128), draft_vocab_size 32000. yuhuili's own config.json for the 70B draft was not readable
  here; its hidden and vocabulary must be the target's, its draft vocabulary and MLP width are
  SpecForge's figures.
- Qwen3-30B-A3B + EAGLE-3 (Tengyunw/qwen3_30b_moe_eagle3, trained with SpecForge, listed in
  its README): the target (Qwen/Qwen3-30B-A3B, its model card and config) 48 layers, hidden
  2048, 32 query / 4 KV heads of 128 with q/k norms, every layer MoE: 128 experts of 768 top-8,
  no shared expert, vocab 151936, untied; the draft as SpecForge's configs/qwen3-30B-eagle3.json
  states it: one layer, hidden 2048, 6144, 32 query / 4 KV heads of 128, vocab 151936,
  draft_vocab_size 32000. Tengyunw's own config.json was not readable here: that its MLP width
  is SpecForge's 6144 (SpecForge's later qwen3-30B-A3B-eagle3.1.json has 12288) is not
  established; at 12288 the body grows by 75 MB per draft token and each gain falls by at most
  1.4 % of itself (+1.00 % -> +0.99 % at batch 1, 2 draft tokens): no printed digit moves by
  more than one.
- Every EAGLE-3 draft: tensors named as vLLM's ``Eagle3LlamaForCausalLM.load_weights`` reads
  them (``midlayer.*`` with ``hidden_norm``, ``fc`` [hidden, 3 x hidden], ``norm``,
  ``lm_head`` [32000, hidden], ``d2t`` int64 [32000], ``t2d`` bool [vocab]); no embedding
  (whether a published checkpoint holds one is not known here; vLLM shares the target's and
  the estimate only gathers an embedding, so it moves no figure).
- Gemma 4 31B and 26B-A4B with their 1024 x 262144 MTP assistants: exactly the shapes of
  tests/test_estimate.py (which the README's first estimate rows already quote).

Not sure of (none of them moves a figure by more than a rounding digit): whether Qwen3-Next's
published config names its MTP layer count (vLLM defaults it to 1; written here as
``num_nextn_predict_layers: 1``, as the tiny builder does); the dtype of the small vectors
(norms, ``A_log``, ``dt_bias``: BF16 here, a few hundred bytes per layer); whether EAGLE-1's
``fc`` has a bias (vLLM builds it without one).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BF16, F16, F32, FP8, I64, BOOL = "BF16", "F16", "F32", "F8_E4M3", "I64", "BOOL"
_BYTES = {BF16: 2, F16: 2, F32: 4, FP8: 1, I64: 8, BOOL: 1}
Tensors = dict[str, tuple[str, list[int]]]


def write_checkpoint(folder: Path, config: dict, tensors: Tensors) -> Path:
    """config.json plus a safetensors file holding only its header (any weight read fails)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = _BYTES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return folder


def linear(t: Tensors, name: str, out: int, inp: int, dtype: str = BF16, bias: bool = False):
    t[f"{name}.weight"] = (dtype, [out, inp])
    if bias:
        t[f"{name}.bias"] = (BF16, [out])
    if dtype == FP8:  # DeepSeek's block FP8: one F32 scale per 128 x 128 block
        t[f"{name}.weight_scale_inv"] = (F32, [-(-out // 128), -(-inp // 128)])


def vector(t: Tensors, name: str, n: int, dtype: str = BF16) -> None:
    t[name] = (dtype, [n])


def swiglu(t: Tensors, p: str, hidden: int, inter: int, dtype: str = BF16) -> None:
    linear(t, f"{p}.gate_proj", inter, hidden, dtype)
    linear(t, f"{p}.up_proj", inter, hidden, dtype)
    linear(t, f"{p}.down_proj", hidden, inter, dtype)


def routed(t: Tensors, p: str, c: dict, dtype: str = BF16) -> None:
    """A MoE block's router and experts, one tensor per expert, as these checkpoints ship."""
    experts = c.get("num_experts") or c["n_routed_experts"]
    linear(t, f"{p}.gate", experts, c["hidden_size"])
    for e in range(experts):
        swiglu(t, f"{p}.experts.{e}", c["hidden_size"], c["moe_intermediate_size"], dtype)


def gqa(t: Tensors, p: str, c: dict, *, bias: bool = False, gate: bool = False) -> None:
    hidden = c["hidden_size"]
    dim = c.get("head_dim") or hidden // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * dim, c["num_key_value_heads"] * dim
    linear(t, f"{p}.q_proj", q * (2 if gate else 1), hidden, bias=bias)  # gated: query and gate
    linear(t, f"{p}.k_proj", kv, hidden, bias=bias)
    linear(t, f"{p}.v_proj", kv, hidden, bias=bias)
    linear(t, f"{p}.o_proj", hidden, q)


def norms(t: Tensors, p: str, hidden: int) -> None:
    vector(t, f"{p}.input_layernorm.weight", hidden)
    vector(t, f"{p}.post_attention_layernorm.weight", hidden)


def ends(t: Tensors, c: dict, body: str = "model") -> None:
    """The token embedding, the final norm and the untied head."""
    vocab, hidden = c["vocab_size"], c["hidden_size"]
    linear(t, f"{body}.embed_tokens", vocab, hidden)
    vector(t, f"{body}.norm.weight", hidden)
    linear(t, "lm_head", vocab, hidden)


# Qwen3-Next and Qwen3.5: gated delta-net layers, every fourth a gated full-attention layer;
# MoE with a gated shared expert; one MTP layer under mtp.*.


def delta_net(t: Tensors, p: str, c: dict, *, split: bool) -> None:
    hidden = c["hidden_size"]
    keys = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    values = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    heads = c["linear_num_value_heads"]
    if split:  # Qwen3.5 ships the input projections apart
        linear(t, f"{p}.in_proj_qkv", 2 * keys + values, hidden)
        linear(t, f"{p}.in_proj_z", values, hidden)
        linear(t, f"{p}.in_proj_b", heads, hidden)
        linear(t, f"{p}.in_proj_a", heads, hidden)
    else:  # Qwen3-Next fuses them
        linear(t, f"{p}.in_proj_qkvz", 2 * keys + 2 * values, hidden)
        linear(t, f"{p}.in_proj_ba", 2 * heads, hidden)
    t[f"{p}.conv1d.weight"] = (BF16, [2 * keys + values, 1, c["linear_conv_kernel_dim"]])
    vector(t, f"{p}.dt_bias", heads)
    vector(t, f"{p}.A_log", heads)
    vector(t, f"{p}.norm.weight", c["linear_value_head_dim"])
    linear(t, f"{p}.out_proj", hidden, values)


def qwen_layer(t: Tensors, p: str, c: dict, *, full: bool, split: bool) -> None:
    hidden = c["hidden_size"]
    norms(t, p, hidden)
    if full:
        gqa(t, f"{p}.self_attn", c, gate=True)
        vector(t, f"{p}.self_attn.q_norm.weight", c["head_dim"])
        vector(t, f"{p}.self_attn.k_norm.weight", c["head_dim"])
    else:
        delta_net(t, f"{p}.linear_attn", c, split=split)
    routed(t, f"{p}.mlp", c)
    swiglu(t, f"{p}.mlp.shared_expert", hidden, c["shared_expert_intermediate_size"])
    linear(t, f"{p}.mlp.shared_expert_gate", 1, hidden)


def qwen_hybrid(c: dict, body: str, *, split: bool) -> Tensors:
    t: Tensors = {}
    ends(t, c, body)
    every = c["full_attention_interval"]
    for i in range(c["num_hidden_layers"]):
        qwen_layer(t, f"{body}.layers.{i}", c, full=(i + 1) % every == 0, split=split)
    hidden = c["hidden_size"]
    linear(t, "mtp.fc", hidden, 2 * hidden)
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        vector(t, f"mtp.{name}.weight", hidden)
    qwen_layer(t, "mtp.layers.0", c, full=True, split=split)
    return t


QWEN_ATTENTION = dict(
    hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
    full_attention_interval=4, linear_num_key_heads=16, linear_num_value_heads=32,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
    moe_intermediate_size=512, shared_expert_intermediate_size=512, tie_word_embeddings=False,
    partial_rotary_factor=0.25, rms_norm_eps=1e-6, hidden_act="silu",
)  # fmt: skip


def qwen3_5_35b_a3b(out: Path) -> tuple[Path, Path]:
    c = dict(QWEN_ATTENTION, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe",
             num_hidden_layers=40, num_experts=256, num_experts_per_tok=8, vocab_size=248320,
             attn_output_gate=True, mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False,
             max_position_embeddings=262144, dtype="bfloat16")  # fmt: skip
    target = write_checkpoint(out / "target", c, qwen_hybrid(c, "model.language_model", split=True))
    return target, target


def qwen3_next_80b_a3b(out: Path) -> tuple[Path, Path]:
    c = dict(QWEN_ATTENTION, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
             num_hidden_layers=48, num_experts=512, num_experts_per_tok=10, vocab_size=151936,
             intermediate_size=5120, decoder_sparse_step=1, mlp_only_layers=[],
             norm_topk_prob=True, num_nextn_predict_layers=1, max_position_embeddings=262144,
             torch_dtype="bfloat16")  # fmt: skip
    target = write_checkpoint(out / "target", c, qwen_hybrid(c, "model", split=False))
    return target, target


# DeepSeek-V3 and GLM-4.5: dense first layers, then MoE with a shared expert; the MTP layer is
# one layer after the target's, with its glue beside it.


def mtp_glue(t: Tensors, p: str, c: dict) -> None:
    vocab, hidden = c["vocab_size"], c["hidden_size"]
    linear(t, f"{p}.embed_tokens", vocab, hidden)
    vector(t, f"{p}.enorm.weight", hidden)
    vector(t, f"{p}.hnorm.weight", hidden)
    linear(t, f"{p}.eh_proj", hidden, 2 * hidden)
    vector(t, f"{p}.shared_head.norm.weight", hidden)
    linear(t, f"{p}.shared_head.head", vocab, hidden)


def mla(t: Tensors, p: str, c: dict, dtype: str) -> None:
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    q_rank, kv_rank = c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    linear(t, f"{p}.q_a_proj", q_rank, hidden, dtype)
    vector(t, f"{p}.q_a_layernorm.weight", q_rank)
    linear(t, f"{p}.q_b_proj", heads * (nope + rope), q_rank, dtype)
    linear(t, f"{p}.kv_a_proj_with_mqa", kv_rank + rope, hidden, dtype)
    vector(t, f"{p}.kv_a_layernorm.weight", kv_rank)
    linear(t, f"{p}.kv_b_proj", heads * (nope + v), kv_rank, dtype)
    linear(t, f"{p}.o_proj", hidden, heads * v, dtype)


def deepseek_style(c: dict, attention: Callable[[Tensors, str], None], dtype: str) -> Tensors:
    t: Tensors = {}
    ends(t, c)
    layers, hidden = c["num_hidden_layers"], c["hidden_size"]
    for i in range(layers + c["num_nextn_predict_layers"]):
        p = f"model.layers.{i}"
        norms(t, p, hidden)
        attention(t, f"{p}.self_attn")
        if i < c["first_k_dense_replace"]:
            swiglu(t, f"{p}.mlp", hidden, c["intermediate_size"], dtype)
            continue
        routed(t, f"{p}.mlp", c, dtype)
        vector(t, f"{p}.mlp.gate.e_score_correction_bias", c["n_routed_experts"], F32)
        shared = c["moe_intermediate_size"] * c["n_shared_experts"]
        swiglu(t, f"{p}.mlp.shared_experts", hidden, shared, dtype)
        if i >= layers:
            mtp_glue(t, p, c)
    return t


def deepseek_v3(out: Path) -> tuple[Path, Path]:
    c = dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", vocab_size=129280,
             hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
             num_hidden_layers=61, first_k_dense_replace=3, n_routed_experts=256,
             n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4,
             topk_method="noaux_tc", scoring_func="sigmoid", routed_scaling_factor=2.5,
             num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536,
             kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
             num_nextn_predict_layers=1, tie_word_embeddings=False, torch_dtype="bfloat16",
             quantization_config={"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128]})  # fmt: skip
    tensors = deepseek_style(c, lambda t, p: mla(t, p, c, FP8), FP8)
    target = write_checkpoint(out / "target", c, tensors)
    return target, target


def glm45_air(out: Path) -> tuple[Path, Path]:
    c = dict(architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", vocab_size=151552,
             hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408,
             num_hidden_layers=46, first_k_dense_replace=1, n_routed_experts=128,
             n_shared_experts=1, num_experts_per_tok=8, n_group=1, topk_group=1,
             routed_scaling_factor=1.0, norm_topk_prob=True, num_attention_heads=96,
             num_key_value_heads=8, head_dim=128, attention_bias=True, use_qk_norm=False,
             partial_rotary_factor=0.5, num_nextn_predict_layers=1, tie_word_embeddings=False,
             torch_dtype="bfloat16")  # fmt: skip
    tensors = deepseek_style(c, lambda t, p: gqa(t, p, c, bias=True), BF16)
    target = write_checkpoint(out / "target", c, tensors)
    return target, target


def llama_layer(t: Tensors, p: str, c: dict, *, bias: bool = False) -> None:
    norms(t, p, c["hidden_size"])
    gqa(t, f"{p}.self_attn", c, bias=bias)
    swiglu(t, f"{p}.mlp", c["hidden_size"], c["intermediate_size"])


def mimo_7b(out: Path) -> tuple[Path, Path]:
    c = dict(architectures=["MiMoForCausalLM"], model_type="mimo", vocab_size=151680,
             hidden_size=4096, intermediate_size=11008, num_hidden_layers=36,
             num_attention_heads=32, num_key_value_heads=8, attention_bias=True,
             num_nextn_predict_layers=1, tie_word_embeddings=False,
             max_position_embeddings=32768, torch_dtype="bfloat16")  # fmt: skip
    t: Tensors = {}
    ends(t, c)
    for i in range(c["num_hidden_layers"]):
        llama_layer(t, f"model.layers.{i}", c, bias=True)
    p, hidden = "model.mtp_layers.0", c["hidden_size"]
    llama_layer(t, p, c, bias=True)
    for name in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
        vector(t, f"{p}.{name}.weight", hidden)
    linear(t, f"{p}.input_proj", hidden, 2 * hidden)
    target = write_checkpoint(out / "target", c, t)
    return target, target


LLAMA_3_1_8B = dict(model_type="llama", vocab_size=128256, hidden_size=4096,
                    intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    torch_dtype="bfloat16")  # fmt: skip


def llama_target(out: Path, c: dict) -> Path:
    t: Tensors = {}
    ends(t, c)
    for i in range(c["num_hidden_layers"]):
        llama_layer(t, f"model.layers.{i}", c)
    return write_checkpoint(out / "target", c, t)


def llama31_8b_eagle1(out: Path) -> tuple[Path, Path]:
    c = dict(LLAMA_3_1_8B, architectures=["LlamaForCausalLM"], num_hidden_layers=32)
    target = llama_target(out, c)
    d = dict(LLAMA_3_1_8B, architectures=["LlamaForCausalLM"], num_hidden_layers=1)
    draft: Tensors = {}
    llama_layer(draft, "layers.0", d)
    del draft["layers.0.input_layernorm.weight"]  # EAGLE-1's first layer has none
    linear(draft, "fc", d["hidden_size"], 2 * d["hidden_size"])
    return target, write_checkpoint(out / "draft", d, draft)


# EAGLE-3 drafts: one decoder layer whose attention reads 2 x hidden (the token embedding beside
# the fused hidden state), ``fc`` over three target layers' hidden states, a head of their own
# over draft_vocab_size rows and the id maps, named as vLLM's Eagle3LlamaForCausalLM loads them.


def eagle3_draft(out: Path, d: dict) -> Path:
    hidden, target_hidden = d["hidden_size"], d.get("target_hidden_size") or d["hidden_size"]
    dim = d.get("head_dim") or hidden // d["num_attention_heads"]
    q, kv = d["num_attention_heads"] * dim, d["num_key_value_heads"] * dim
    t: Tensors = {}
    p = "midlayer"
    for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        vector(t, f"{p}.{name}.weight", hidden)
    linear(t, f"{p}.self_attn.q_proj", q, 2 * hidden)
    linear(t, f"{p}.self_attn.k_proj", kv, 2 * hidden)
    linear(t, f"{p}.self_attn.v_proj", kv, 2 * hidden)
    linear(t, f"{p}.self_attn.o_proj", hidden, q)
    swiglu(t, f"{p}.mlp", hidden, d["intermediate_size"])
    linear(t, "fc", hidden, 3 * target_hidden)
    vector(t, "norm.weight", hidden)
    linear(t, "lm_head", d["draft_vocab_size"], hidden)
    t["d2t"] = (I64, [d["draft_vocab_size"]])  # draft id -> target id offset
    t["t2d"] = (BOOL, [d["vocab_size"]])  # which target ids are in the draft vocabulary
    return write_checkpoint(out / "draft", d, t)


def eagle3_config(target: dict, **fields) -> dict:
    return dict(target, architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                num_hidden_layers=1, draft_vocab_size=32000, tie_word_embeddings=False,
                **fields)  # fmt: skip


def llama31_8b_eagle3(out: Path) -> tuple[Path, Path]:
    target = llama_target(out, dict(LLAMA_3_1_8B, architectures=["LlamaForCausalLM"],
                                    num_hidden_layers=32))  # fmt: skip
    return target, eagle3_draft(out, eagle3_config(LLAMA_3_1_8B))


LLAMA_3_3_70B = dict(model_type="llama", vocab_size=128256, hidden_size=8192,
                     intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8,
                     head_dim=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
                     torch_dtype="bfloat16")  # fmt: skip


def llama33_70b_eagle3(out: Path) -> tuple[Path, Path]:
    target = llama_target(out, dict(LLAMA_3_3_70B, architectures=["LlamaForCausalLM"],
                                    num_hidden_layers=80))  # fmt: skip
    return target, eagle3_draft(out, eagle3_config(LLAMA_3_3_70B))


QWEN3_30B_A3B = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                     vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                     moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, num_experts=128,
                     num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                     mlp_only_layers=[], rms_norm_eps=1e-6, tie_word_embeddings=False,
                     torch_dtype="bfloat16")  # fmt: skip


def qwen3_30b_a3b_eagle3(out: Path) -> tuple[Path, Path]:
    c = QWEN3_30B_A3B
    t: Tensors = {}
    ends(t, c)
    for i in range(c["num_hidden_layers"]):  # every layer MoE, no shared expert
        p = f"model.layers.{i}"
        norms(t, p, c["hidden_size"])
        gqa(t, f"{p}.self_attn", c)
        vector(t, f"{p}.self_attn.q_norm.weight", c["head_dim"])
        vector(t, f"{p}.self_attn.k_norm.weight", c["head_dim"])
        routed(t, f"{p}.mlp", c)
    target = write_checkpoint(out / "target", c, t)
    # The draft: a dense Llama layer of the target's width (SpecForge's qwen3-30B-eagle3.json).
    d = dict(model_type="llama", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
             num_attention_heads=32, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-6,
             torch_dtype="bfloat16")  # fmt: skip
    return target, eagle3_draft(out, eagle3_config(d))


# Gemma 4: the shapes of tests/test_estimate.py (dense 31B-shaped with a vision tower the
# estimate skips; MoE 26B-A4B-shaped), each with a 1024 x 262144 assistant.

GEMMA_VOCAB = 262144


def gemma_layer(t: Tensors, i: int, hidden: int, inter: int, q: int, kv: int) -> None:
    p = f"model.language_model.layers.{i}"
    linear(t, f"{p}.self_attn.q_proj", q, hidden)
    linear(t, f"{p}.self_attn.k_proj", kv, hidden)
    linear(t, f"{p}.self_attn.v_proj", kv, hidden)
    linear(t, f"{p}.self_attn.o_proj", hidden, q)
    swiglu(t, f"{p}.mlp", hidden, inter)
    vector(t, f"{p}.input_layernorm.weight", hidden)


def gemma_assistant(out: Path, backbone: int) -> Path:
    hidden = 1024
    t: Tensors = {}
    linear(t, "model.embed_tokens", GEMMA_VOCAB, hidden)
    linear(t, "pre_projection", hidden, 2 * backbone)
    linear(t, "post_projection", backbone, hidden)
    for i in range(4):  # KV-shared layers: no k/v projections of their own
        gemma_layer(t, i, hidden, 8192, 4096, 0)
    c = {"model_type": "gemma4_assistant", "backbone_hidden_size": backbone, "dtype": "bfloat16",
         "text_config": {"hidden_size": hidden, "vocab_size": GEMMA_VOCAB}}  # fmt: skip
    return write_checkpoint(out / "assistant", c, t)


def gemma4_31b(out: Path) -> tuple[Path, Path]:
    hidden, layers = 5376, 60
    t: Tensors = {}
    linear(t, "model.language_model.embed_tokens", GEMMA_VOCAB, hidden)
    vector(t, "model.language_model.norm.weight", hidden)
    linear(t, "model.vision_tower.encoder", 1152, 4304)
    for i in range(layers):
        gemma_layer(t, i, hidden, 21504, 8192, 4096)
    text = {"hidden_size": hidden, "vocab_size": GEMMA_VOCAB, "num_hidden_layers": layers}
    c = {"model_type": "gemma4", "dtype": "bfloat16", "tie_word_embeddings": True,
         "text_config": text}  # fmt: skip
    return write_checkpoint(out / "target", c, t), gemma_assistant(out, hidden)


def gemma4_26b_a4b(out: Path) -> tuple[Path, Path]:
    hidden, layers, experts, inter = 2816, 30, 128, 704
    t: Tensors = {}
    linear(t, "model.language_model.embed_tokens", GEMMA_VOCAB, hidden)
    for i in range(layers):
        p = f"model.language_model.layers.{i}"
        gemma_layer(t, i, hidden, 2112, 4096, 2048)
        linear(t, f"{p}.router.proj", experts, hidden)
        t[f"{p}.experts.gate_up_proj"] = (BF16, [experts, 2 * inter, hidden])
        t[f"{p}.experts.down_proj"] = (BF16, [experts, hidden, inter])
    text = {"hidden_size": hidden, "vocab_size": GEMMA_VOCAB, "num_hidden_layers": layers,
            "enable_moe_block": True, "num_experts": experts, "top_k_experts": 8}  # fmt: skip
    c = {"model_type": "gemma4", "text_config": text}
    return write_checkpoint(out / "target", c, t), gemma_assistant(out, hidden)


@dataclass(frozen=True)
class Pair:
    key: str  # the pair's folder name and JSON key
    target: str  # for people: the target as published
    drafter: str  # for people: the drafter
    family: str | None  # the drafter family `check` should recognise (None: none yet, maybe)
    write: Callable[[Path], tuple[Path, Path]]  # -> (target folder, drafter folder)


PAIRS = (
    Pair("qwen3.5-35b-a3b", "Qwen3.5-35B-A3B", "MTP", None, qwen3_5_35b_a3b),
    Pair("qwen3-next-80b-a3b", "Qwen3-Next-80B-A3B", "MTP", "qwen3-next-mtp", qwen3_next_80b_a3b),
    Pair("deepseek-v3", "DeepSeek-V3 (FP8)", "MTP", "deepseek-v3-mtp", deepseek_v3),
    Pair("glm-4.5-air", "GLM-4.5-Air", "MTP", "glm45-mtp", glm45_air),
    Pair("mimo-7b", "MiMo-7B", "MTP", "mimo-mtp", mimo_7b),
    Pair("llama-3.1-8b", "Llama 3.1 8B", "EAGLE-1", "llama-eagle1", llama31_8b_eagle1),
    Pair("llama-3.1-8b-eagle3", "Llama 3.1 8B", "EAGLE-3", "llama-eagle3", llama31_8b_eagle3),
    Pair("llama-3.3-70b-eagle3", "Llama 3.3 70B", "EAGLE-3", "llama-eagle3", llama33_70b_eagle3),
    Pair("qwen3-30b-a3b-eagle3", "Qwen3-30B-A3B", "EAGLE-3", "llama-eagle3",
         qwen3_30b_a3b_eagle3),
    Pair("gemma4-31b", "Gemma 4 31B-shaped", "MTP assistant", "gemma4-mtp", gemma4_31b),
    Pair("gemma4-26b-a4b", "Gemma 4 26B-A4B-shaped", "MTP assistant", "gemma4-mtp",
         gemma4_26b_a4b),
)  # fmt: skip
