"""``bench/estimate_table.py``: ``check --estimate`` on header-only checkpoints in the published
shapes of real targets. Each drafter is recognised as its family, the head's bytes are the
rows x hidden the model publishes (an EAGLE-3 draft's own head: its draft vocabulary, counted
once), the MTP layers count as the draft and not the target, and the tables in the user guide,
docs/benchmarks.md and bench/results are what the script computes now, so they cannot go
stale. No engine; the checkpoints are headers only (~34 MB, written once for the module)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import estimate_table
from bench.published_shapes import PAIRS
from draft_head_fp8 import families, settings
from draft_head_fp8.checkpoint import read_config

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED_HEADS = {  # rows x hidden of the head a draft token reads, from each config.json
    "qwen3.5-35b-a3b": (248320, 2048),
    "qwen3-next-80b-a3b": (151936, 2048),
    "deepseek-v3": (129280, 7168),
    "glm-4.5-air": (151552, 4096),
    "mimo-7b": (151680, 4096),
    "llama-3.1-8b": (128256, 4096),
    # EAGLE-3: the draft's own head over its draft_vocab_size, not the target's vocabulary.
    "llama-3.1-8b-eagle3": (32000, 4096),
    "llama-3.3-70b-eagle3": (32000, 8192),
    "qwen3-30b-a3b-eagle3": (32000, 2048),
    "gemma4-31b": (262144, 1024),
    "gemma4-26b-a4b": (262144, 1024),
}
K = settings.DEFAULT_RESCORE_TOPK


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("estimate-table")
    return out, estimate_table.run(out)


def rows(result: dict, key: str) -> dict:
    return {(r["batch"], r["speculative_tokens"]): r for r in result["pairs"][key]["rows"]}


def test_every_drafter_is_recognised_as_its_family(table):
    out, result = table
    assert [p.key for p in PAIRS] == list(PUBLISHED_HEADS)
    for pair in PAIRS:
        folders = result["pairs"][pair.key]["folders"]
        draft = out / folders["draft"]
        assert (folders["draft"] == folders["target"]) == (pair.drafter == "MTP")
        family = families.for_config(read_config(draft), draft)
        if pair.family is None:  # Qwen3.5: a record may exist by now; it must place mtp.*
            assert family is None or family.draft_prefixes(read_config(draft)) == ("mtp.",)
        else:
            assert family is not None and family.name == pair.family, pair.key
        assert result["pairs"][pair.key]["family"] == (family.name if family else None)


def test_the_head_is_the_published_one_and_fp8_halves_it(table):
    _, result = table
    for key, (vocab, hidden) in PUBLISHED_HEADS.items():
        pair = result["pairs"][key]
        assert (pair["head_rows"], pair["hidden"]) == (vocab, hidden)
        for (batch, n), r in rows(result, key).items():
            b = r["bytes"]
            assert b["draft_head_bf16"] == n * vocab * hidden * 2  # BF16, read per draft token
            # FP8: half, plus the 4-byte scale, plus the BF16 rows the exact pick rescores.
            saved = vocab * hidden - 4 - batch * K * hidden * 2
            assert b["draft_head_bf16"] - b["draft_head_fp8"] == n * saved
            assert b["step_bf16"] - b["step_fp8"] == n * saved
            assert r["speedup_equal_acceptance"] > 0


def test_mtp_layers_are_the_drafts_body_read_per_draft_token(table):
    _, result = table
    for pair in PAIRS:
        r = rows(result, pair.key)
        if not r:
            continue
        one, three = r[1, 1]["bytes"], r[1, 3]["bytes"]
        assert 0 < one["draft_body"] < 0.1 * one["target"], pair.key
        assert three["draft_body"] == 3 * one["draft_body"]
    # DeepSeek-V3's MTP layer is an MoE layer: one token reads 8 of its 256 experts, eight
    # tokens more of them, so the body grows with the batch (the EAGLE draft's does not).
    deepseek, llama = rows(result, "deepseek-v3"), rows(result, "llama-3.1-8b")
    assert deepseek[8, 1]["bytes"]["draft_body"] > 2 * deepseek[1, 1]["bytes"]["draft_body"]
    assert llama[8, 1]["bytes"]["draft_body"] == llama[1, 1]["bytes"]["draft_body"]


def test_the_gain_follows_the_bytes_a_target_reads(table):
    _, result = table

    def gain(key, batch, n=2):
        return rows(result, key)[batch, n]["speedup_equal_acceptance"]

    # A dense target reads all its weights at any batch: the gain barely moves with it. An MoE
    # target reads only the experts its tokens touch, more at batch 8: the gain falls.
    for dense in ("llama-3.1-8b", "mimo-7b", "gemma4-31b"):
        assert gain(dense, 8) == pytest.approx(gain(dense, 1), rel=0.01)
    for moe in ("qwen3-next-80b-a3b", "deepseek-v3", "glm-4.5-air", "gemma4-26b-a4b"):
        assert gain(moe, 8) < 0.5 * gain(moe, 1)
    # A3B reads less per step than a dense 31B: its head is a larger share...
    assert gain("qwen3-next-80b-a3b", 1) > 3 * gain("gemma4-31b", 1)
    # ...but not than a dense 8B's, whose head (128256 x 4096) is 1.7x Qwen3-Next's.
    assert gain("llama-3.1-8b", 1) > gain("qwen3-next-80b-a3b", 1)
    # The Gemma 4 rows are those the README quoted before this table (tests/test_estimate.py).
    assert round(gain("gemma4-31b", 1), 4) == 0.0087
    assert round(gain("gemma4-26b-a4b", 1), 4) == 0.0389


EAGLE3_LAYERS = {  # hidden, query width, key/value width, MLP width, from each draft config
    "llama-3.1-8b-eagle3": (4096, 32 * 128, 8 * 128, 14336),
    "llama-3.3-70b-eagle3": (8192, 64 * 128, 8 * 128, 28672),
    "qwen3-30b-a3b-eagle3": (2048, 32 * 128, 4 * 128, 6144),
}


def test_an_eagle3_drafts_own_head_is_its_head_not_also_its_body(table):
    _, result = table
    for key, (h, q, kv, inter) in EAGLE3_LAYERS.items():
        pair = result["pairs"][key]
        assert pair["vocab"] > pair["head_rows"] == 32000, key  # mapped to the target's ids
        # By hand: the layer (its attention reads 2 x hidden), fc over three hidden states, four
        # norms, and d2t (int64, read whole by compute_logits per draft token); not lm_head,
        # which is the head, nor t2d, which vLLM never loads.
        weights = q * 2 * h + 2 * kv * 2 * h + h * q + 3 * inter * h + h * 3 * h + 4 * h
        expected = weights * 2 + 32000 * 8
        for (batch, n), r in rows(result, key).items():
            assert r["bytes"]["draft_body"] == n * expected, (key, batch, n)
    # Same 8B target: EAGLE-3's 32000-row head saves a quarter of what EAGLE-1's shared
    # 128256-row head does per draft token (FP8 halves each).
    own, shared = rows(result, "llama-3.1-8b-eagle3"), rows(result, "llama-3.1-8b")
    saved = {
        name: r[1, 1]["bytes"]["draft_head_bf16"] - r[1, 1]["bytes"]["draft_head_fp8"]
        for name, r in (("own", own), ("shared", shared))
    }
    assert saved["own"] / saved["shared"] == pytest.approx(32000 / 128256, rel=1e-3)
    assert own[1, 2]["speedup_equal_acceptance"] < 0.5 * shared[1, 2]["speedup_equal_acceptance"]


@pytest.mark.parametrize("key", ["llama-3.1-8b", "llama-3.1-8b-eagle3"])
def test_the_row_is_what_the_check_command_prints(table, key):
    out, result = table
    pair = out / key
    proc = subprocess.run(
        [sys.executable, "-m", "draft_head_fp8.cli", "check", str(pair / "draft"), "--target",
         str(pair / "target"), "--estimate", "--batch", "8", "--speculative-tokens", "3",
         "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    printed = json.loads(proc.stdout)["estimate"]
    r = rows(result, key)[8, 3]
    assert printed["bytes"] == r["bytes"]
    assert printed["speedup_equal_acceptance"] == r["speedup_equal_acceptance"]
    assert printed["bandwidth_gbps"] == result["bandwidth_gbps"]


def test_an_mtp_target_without_a_family_record_says_so_rather_than_guess(table, monkeypatch):
    out, _ = table
    qwen35 = out / "qwen3.5-35b-a3b" / "target"
    others = tuple(f for f in families.all_families() if "qwen3_5_moe" not in f.model_types)
    monkeypatch.setattr(families, "all_families", lambda: others)
    reason = estimate_table.unplaced_drafter(qwen35, qwen35)
    assert reason and reason.startswith("not estimated:") and "qwen3_5_moe" in reason
    # With a record that places mtp.* (as the Qwen3.5 family will), the row is estimated.
    record = dataclasses.replace(
        families.by_name("qwen3-next-mtp"),
        name="qwen3.5-mtp-stand-in",
        model_types=("qwen3_5_moe",),
        hf_architectures=("Qwen3_5MoeForCausalLM",),
    )
    monkeypatch.setattr(families, "all_families", lambda: (record, *others))
    assert estimate_table.unplaced_drafter(qwen35, qwen35) is None
    pair = next(p for p in PAIRS if p.key == "qwen3.5-35b-a3b")
    estimated = estimate_table.estimate_pair(pair, out / "with-record")
    assert estimated["reason"] is None and len(estimated["rows"]) == 6
    first = estimated["rows"][0]
    assert (first["batch"], first["speculative_tokens"]) == (1, 1)
    # One MTP layer, 8 of its 256 experts: not the whole target.
    assert 0 < first["bytes"]["draft_body"] < 0.05 * first["bytes"]["target"]


def test_the_published_tables_are_what_the_script_computes_now(table):
    _, result = table
    stale = "stale: run `python -m bench.estimate_table` and paste its tables"
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for line in estimate_table.compact_table(result).splitlines():
        assert line in guide, f"docs/user-guide.md {stale}: {line}"
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    for line in estimate_table.full_table(result).splitlines():
        assert line in benchmarks, f"docs/benchmarks.md {stale}: {line}"
    recorded = json.loads((ROOT / "bench" / "results" / "estimate_table.json").read_text())
    assert recorded["pairs"] == json.loads(json.dumps(result["pairs"])), f"the JSON is {stale}"
