"""``check --estimate``: bytes per decode step from configs and safetensors headers alone, for a
dense and a MoE target shaped like the public Gemma 4 31B and 26B-A4B, checked against numbers
worked out by hand here. Header-only checkpoint files: the estimate must never read weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_support import W8A16

from bench.published_shapes import write_checkpoint  # header-only checkpoints
from draft_head_fp8 import estimate

VOCAB = 262144
BF16 = 2


def dense_layer(i: int, hidden: int, inter: int, q: int, kv: int) -> dict:
    p = f"model.language_model.layers.{i}"
    return {
        f"{p}.self_attn.q_proj.weight": ("BF16", [q, hidden]),
        f"{p}.self_attn.k_proj.weight": ("BF16", [kv, hidden]),
        f"{p}.self_attn.v_proj.weight": ("BF16", [kv, hidden]),
        f"{p}.self_attn.o_proj.weight": ("BF16", [hidden, q]),
        f"{p}.mlp.gate_proj.weight": ("BF16", [inter, hidden]),
        f"{p}.mlp.up_proj.weight": ("BF16", [inter, hidden]),
        f"{p}.mlp.down_proj.weight": ("BF16", [hidden, inter]),
        f"{p}.input_layernorm.weight": ("BF16", [hidden]),
    }


def assistant(tmp: Path, backbone: int) -> Path:
    hidden = 1024
    tensors = {"model.embed_tokens.weight": ("BF16", [VOCAB, hidden]),
               "pre_projection.weight": ("BF16", [hidden, 2 * backbone]),
               "post_projection.weight": ("BF16", [backbone, hidden])}  # fmt: skip
    for i in range(4):
        tensors.update(dense_layer(i, hidden, 8192, 4096, 0))
    config = {
        "model_type": "gemma4_assistant",
        "backbone_hidden_size": backbone,
        "dtype": "bfloat16",
        "text_config": {"hidden_size": hidden, "vocab_size": VOCAB},
    }
    return write_checkpoint(tmp / "assistant", config, tensors)


def assistant_body_bytes(backbone: int) -> int:
    hidden = 1024
    layer = (4096 * hidden * 2 + 0 + 0 + 8192 * hidden * 3 + hidden) * BF16
    # k/v projections have 0 rows here (the assistant's layers are KV-shared)
    return 4 * layer + (hidden * 2 * backbone + backbone * hidden) * BF16


@pytest.fixture
def dense_pair(tmp_path):
    hidden, layers, inter = 5376, 60, 21504
    tensors = {"model.language_model.embed_tokens.weight": ("BF16", [VOCAB, hidden]),
               "model.language_model.norm.weight": ("BF16", [hidden]),
               "model.vision_tower.encoder.weight": ("BF16", [1152, 4304]),
               "model.visual.blocks.0.mlp.linear_fc1.weight": ("BF16", [4304, 1152])}  # fmt: skip
    for i in range(layers):
        tensors.update(dense_layer(i, hidden, inter, 8192, 4096))
    text = {"hidden_size": hidden, "vocab_size": VOCAB, "num_hidden_layers": layers}
    config = {"model_type": "gemma4", "dtype": "bfloat16", "tie_word_embeddings": True}
    config["text_config"] = text
    target = write_checkpoint(tmp_path / "target", config, tensors)
    layer = (8192 * hidden * 2 + 4096 * hidden * 2 + inter * hidden * 3 + hidden) * BF16
    # By hand: every layer once, the final norm, and the tied embedding read whole as the head;
    # the vision towers (Gemma's and Qwen-VL's names) are not read to decode text.
    expected_target = layers * layer + hidden * BF16 + VOCAB * hidden * BF16
    return target, assistant(tmp_path, hidden), expected_target


@pytest.fixture
def moe_pair(tmp_path):
    hidden, layers, experts, top_k, expert_inter = 2816, 30, 128, 8, 704
    tensors = {"model.language_model.embed_tokens.weight": ("BF16", [VOCAB, hidden])}
    for i in range(layers):
        p = f"model.language_model.layers.{i}"
        tensors.update(dense_layer(i, hidden, 2112, 4096, 2048))
        tensors[f"{p}.router.proj.weight"] = ("BF16", [experts, hidden])
        tensors[f"{p}.experts.gate_up_proj"] = ("BF16", [experts, 2 * expert_inter, hidden])
        tensors[f"{p}.experts.down_proj"] = ("BF16", [experts, hidden, expert_inter])
    text = {"hidden_size": hidden, "vocab_size": VOCAB, "num_hidden_layers": layers,
            "enable_moe_block": True, "num_experts": experts, "top_k_experts": top_k}  # fmt: skip
    target = write_checkpoint(
        tmp_path / "target", {"model_type": "gemma4", "text_config": text}, tensors
    )
    shared = (
        layers
        * ((4096 * hidden * 2 + 2048 * hidden * 2 + 2112 * hidden * 3 + hidden) + experts * hidden)
        * BF16
        + VOCAB * hidden * BF16
    )
    per_expert = (2 * expert_inter * hidden + hidden * expert_inter) * BF16  # one layer's expert
    return target, assistant(tmp_path, hidden), shared, per_expert, layers, experts, top_k


def test_dense_target_bytes_per_step_by_hand(dense_pair):
    target, helper, expected_target = dense_pair
    step = estimate.step_bytes(target, helper, speculative_tokens=2, batch=1, rescore_k=4)
    assert step.target == expected_target
    assert step.draft_body == 2 * assistant_body_bytes(5376)
    assert step.draft_head_bf16 == 2 * VOCAB * 1024 * 2
    assert step.draft_head_fp8 == 2 * (VOCAB * 1024 + 4 + 1 * 4 * 1024 * 2)
    # ~62 GB per step for a 31B-shaped dense target: the FP8 head buys about 1 %.
    assert 55e9 < step.target < 70e9
    gain = estimate.speedup(step)
    assert gain == pytest.approx(step.bf16 / step.fp8 - 1)
    assert 0.003 < gain < 0.02
    assert estimate.break_even_loss(step) == pytest.approx(1 - step.fp8 / step.bf16)
    # A 3 % acceptance loss (what plain FP8 cost on the tiny pair) would make it slower.
    assert estimate.with_loss(step, 0.03) < 0


def test_moe_target_reads_only_the_routed_experts(moe_pair):
    target, helper, shared, per_expert, layers, experts, top_k = moe_pair
    for batch, spec in ((1, 2), (8, 3)):
        tokens = batch * (spec + 1)
        touched = experts * (1 - (1 - top_k / experts) ** tokens)
        step = estimate.step_bytes(
            target, helper, speculative_tokens=spec, batch=batch, rescore_k=4
        )
        assert step.target == pytest.approx(shared + layers * per_expert * touched)
    one = estimate.step_bytes(target, helper, speculative_tokens=2, batch=1, rescore_k=4)
    # The head is a far larger share of an A4B step: several percent, not one.
    assert estimate.speedup(one) > 0.03
    big = estimate.step_bytes(target, helper, speculative_tokens=2, batch=64, rescore_k=4)
    assert estimate.speedup(big) < estimate.speedup(one)  # more experts touched, smaller share


def test_expert_weights_without_routing_config_say_what_is_missing(moe_pair, tmp_path):
    target, helper, *_ = moe_pair
    config = json.loads((target / "config.json").read_text())
    del config["text_config"]["top_k_experts"]
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(estimate.EstimateError, match="top_k_experts or num_experts_per_tok"):
        estimate.step_bytes(target, helper, speculative_tokens=2, batch=1, rescore_k=4)


def test_a_folder_without_weights_says_so(dense_pair, tmp_path):
    target, helper, _ = dense_pair
    (target / "model.safetensors").unlink()
    with pytest.raises(estimate.EstimateError, match="no .safetensors files"):
        estimate.step_bytes(target, helper, speculative_tokens=2, batch=1, rescore_k=4)


def test_seconds_at_a_bandwidth():
    assert estimate.seconds(4.8e12, estimate.H200_GBPS) == pytest.approx(1.0)


def cli(*args):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "draft_head_fp8.cli", "check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_prints_the_model_with_the_result(dense_pair):
    target, helper, _ = dense_pair
    proc = cli(helper, "--target", target, "--estimate", "--bandwidth", "3350", "--json")
    # The estimate is printed whatever the verdict (exit 3 on a CPU without the W8A16 op).
    assert proc.returncode == (0 if W8A16 else 3), proc.stderr
    report = json.loads(proc.stdout)["estimate"]
    step = estimate.step_bytes(target, helper, speculative_tokens=2, batch=1, rescore_k=8)
    assert report["bytes"]["step_bf16"] == step.bf16 and report["bytes"]["step_fp8"] == step.fp8
    assert report["speedup_equal_acceptance"] == pytest.approx(estimate.speedup(step))
    assert report["seconds"]["step_bf16"] == pytest.approx(step.bf16 / 3350e9)
    text = cli(helper, "--target", target, "--estimate").stdout
    assert "memory-bound decode step: bytes read / bandwidth, 4,800 GB/s" in text
    assert "per decode step at equal acceptance" in text and "would cancel that" in text


def test_the_command_says_what_the_estimate_lacks(dense_pair, tmp_path):
    target, helper, _ = dense_pair
    proc = cli(helper, "--estimate")
    assert proc.returncode == 2 and "--estimate needs --target" in proc.stderr
    (target / "model.safetensors").unlink()
    proc = cli(helper, "--target", target, "--estimate")
    assert proc.returncode == 2
    assert "cannot estimate:" in proc.stderr and "no .safetensors files" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_mtp_layers_inside_the_target_are_the_drafts_body_not_the_targets(tmp_path):
    from draft_head_fp8.tiny import build

    pair = build("mimo-mtp", tmp_path / "mimo")
    step = estimate.step_bytes(pair.target, pair.target, speculative_tokens=2, batch=1, rescore_k=8)
    weights = estimate.read_weights(pair.target)
    mtp = sum(v for k, v in weights.dense.items() if k.startswith("model.mtp_layers."))
    assert mtp > 0 and step.draft_body == 2 * mtp  # the MTP layer, per draft token
    # The target reads everything else (untied: its input embedding is only gathered).
    rest = sum(v for k, v in weights.dense.items() if not k.startswith("model.mtp_layers."))
    assert step.target == rest
    hidden, vocab = 128, 2048
    assert step.draft_head_bf16 == 2 * hidden * vocab * 2  # the target's head, per draft token


def test_qwen35s_mtp_tensors_are_the_drafts_body_experts_routed(tmp_path):
    from draft_head_fp8.tiny import build

    pair = build("qwen35-mtp", tmp_path / "qwen35")
    step = estimate.step_bytes(pair.target, pair.target, speculative_tokens=1, batch=1, rescore_k=8)
    weights = estimate.read_weights(pair.target)
    body = sum(v for k, v in weights.dense.items() if k.startswith("mtp."))
    experts = sum(v for k, v in weights.experts.items() if k.startswith("mtp."))
    assert body > 0 and experts > 0
    # One token routes to top-2 of 4 experts: half the MTP layer's expert bytes.
    assert step.draft_body == body + experts / 2
    assert step.draft_head_bf16 == 128 * 2048 * 2


def test_an_mtp_layers_copy_of_the_head_is_counted_once_as_the_draft_head(tmp_path):
    from draft_head_fp8.tiny import build

    pair = build("deepseek-v3-mtp", tmp_path / "ds")
    step = estimate.step_bytes(pair.target, pair.target, speculative_tokens=1, batch=1, rescore_k=8)
    weights = estimate.read_weights(pair.target)
    assert "model.layers.2.shared_head.head.weight" in weights.skipped
    body = sum(v for k, v in weights.dense.items() if k.startswith("model.layers.2."))
    experts = sum(v for k, v in weights.experts.items() if k.startswith("model.layers.2."))
    # One token routes to top-2 of 4 experts: half the MTP layer's expert bytes.
    assert step.draft_body == body + experts / 2
    assert step.draft_head_bf16 == 128 * 2048 * 2


@pytest.mark.parametrize("shared_head", [False, True], ids=["own-head", "shared-head"])
def test_an_eagle3_draft_reads_its_own_head_or_the_targets_never_both(tmp_path, shared_head):
    from draft_head_fp8.tiny import build
    from draft_head_fp8.tiny.llama_eagle3 import (
        DRAFT_VOCAB,
        HEAD_DIM,
        HEADS,
        HIDDEN,
        INTERMEDIATE,
        KV_HEADS,
        VOCAB,
    )

    pair = build("llama-eagle3", tmp_path / "eagle3", shared_head=shared_head)
    step = estimate.step_bytes(
        pair.target, pair.assistant, speculative_tokens=2, batch=1, rescore_k=8
    )
    # The head: the draft's own over its draft vocabulary, or (no lm_head) the target's.
    rows = VOCAB if shared_head else DRAFT_VOCAB
    assert step.draft_head_bf16 == 2 * rows * HIDDEN * 2
    assert step.draft_head_fp8 == 2 * (rows * HIDDEN + 4 + 1 * 8 * HIDDEN * 2)
    # The body by hand, per draft token: the layer (its attention reads 2 x hidden), fc over
    # three hidden states, four norms, BF16; and d2t (int64, one per draft-vocabulary row),
    # which vLLM's compute_logits reads whole. Not lm_head (the head, counted once, above),
    # nor t2d (vLLM never loads it).
    q, kv, h = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, HIDDEN
    layer = q * 2 * h + 2 * kv * 2 * h + h * q + 3 * INTERMEDIATE * h
    body = (layer + h * 3 * h + 4 * h) * 2 + (0 if shared_head else DRAFT_VOCAB * 8)
    assert step.draft_body == 2 * body
    weights = estimate.read_weights(pair.assistant)
    assert ("lm_head.weight" in weights.dense) != shared_head  # there, but not body
    assert ("t2d" in weights.skipped) != shared_head
