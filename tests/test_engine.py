"""The real vLLM engine (CPU build) on tiny real Gemma 4 checkpoints, flag off and on.

Each engine runs in its own subprocess: vLLM loads plugins once per process and the plugin reads
the flag then. These tests are slow (an engine start is ~10 s here), so they share checkpoints.
"""

from __future__ import annotations

import json
import struct

import pytest
from engine_support import STOCK_MTP, engine_env, run_engine, tree

from draft_head_fp8 import schemas, validate_post_share_receipt
from draft_head_fp8.archive import Archive
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import diagnostics_path, receipt_path
from draft_head_fp8.tiny import build_tiny_pair

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    return {
        "dense": build_tiny_pair(root / "dense", seed=1),
        "ordered": build_tiny_pair(root / "ordered", ordered_embeddings=True, seed=2),
        "untied": build_tiny_pair(root / "untied", untied=True, seed=3),
    }


@pytest.fixture(scope="module")
def flag_off_run(pairs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("off")
    archive = tmp / "archive"
    run = run_engine(tmp, pairs["dense"], engine_env(tmp, flag=False, archive=archive))
    assert run.ok, run.tail(40)
    return tmp, archive, run.facts


@pytest.fixture(scope="module")
def flag_on_run(pairs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("on")
    archive = tmp / "archive"
    run = run_engine(tmp, pairs["dense"], engine_env(tmp, flag=True, archive=archive))
    assert run.ok, run.tail(40)
    return tmp, archive, run.facts


def _without_pointers(receipt):
    return {
        key: {k: v for k, v in value.items() if k != "data_ptr"}
        if isinstance(value, dict)
        else value
        for key, value in receipt.items()
    }


def _only_boot(archive):
    boots = Archive(archive).boots()
    assert len(boots) == 1, boots
    return boots[0]


def test_flag_off_is_stock_vllm(pairs, flag_off_run, tmp_path):
    tmp, archive, off = flag_off_run
    run = run_engine(tmp_path, pairs["dense"], engine_env(tmp_path, flag=False, plugins=False))
    assert run.ok, run.tail(40)
    stock = run.facts
    assert off["token_ids"] == stock["token_ids"]
    assert off["spec_decode"] == stock["spec_decode"]
    for facts in (off["after_start"], stock["after_start"]):
        assert facts["registry_entry"] == STOCK_MTP
        assert facts["drafter_class"] == STOCK_MTP.replace(":", ".")
        assert facts["receipt"]["head_method"] == "UnquantizedEmbeddingMethod"
        assert facts["receipt"]["head_weight"]["dtype"] == "torch.bfloat16"
    # The same observation of both: identical receipts of the stock head (but for addresses).
    assert _without_pointers(off["after_start"]["receipt"]) == _without_pointers(
        stock["after_start"]["receipt"]
    )
    # The plugin was loaded (it is installed) but did nothing: no module, no hook, no file.
    assert off["after_start"]["plugin_modules"] == []
    assert (
        off["after_start"]["module_registration_hooks"]
        == stock["after_start"]["module_registration_hooks"]
    )
    assert not archive.exists()
    assert tree(tmp / "state") == []
    assert tree(tmp / "home") == []


def test_flag_on_serves_an_fp8_draft_head_and_proves_it(pairs, flag_off_run, flag_on_run):
    tmp, archive, on = flag_on_run
    pair = pairs["dense"]
    facts = on["after_start"]
    observed = facts["receipt"]
    assert facts["registry_entry"] == "draft_head_fp8.vllm_plugin.drafter:DraftHeadFp8Gemma4MTP"
    assert observed["head_method"] == "DraftHeadFp8LinearMethod"
    assert observed["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    hidden, vocab = 64, 2048
    assert observed["head_weight"]["shape"] == [hidden, vocab]
    assert observed["head_weight_is_draft_embed"] is False

    # Scale = amax(|W|)/448 of the BF16 head, i.e. of the checkpoint's draft embedding.
    import torch
    from safetensors.torch import load_file

    w = load_file(pair.assistant / "model.safetensors")["model.embed_tokens.weight"]
    assert w.dtype == torch.bfloat16
    expected = (w.float().abs().max() / torch.tensor(448.0)).item()
    boot = _only_boot(archive)
    diagnostics = json.loads(boot.read_bytes(diagnostics_path(0)))
    assert diagnostics["head"]["scale"] == pytest.approx(expected, rel=0, abs=0)

    # The target is untouched: its embedding bytes equal the checkpoint's, after start and after
    # generation; its head is BF16 on the unquantized method; the draft uses its embedding.
    target_sha = tensor_bytes_sha256(pair.target)["sha256"]
    assert on["after_start"]["target_embed_sha256"] == target_sha
    assert on["after_generate"]["target_embed_sha256"] == target_sha
    assert on["after_generate"]["receipt"] == observed  # nothing changed while serving
    assert observed["target_lm_head_method"] == "UnquantizedEmbeddingMethod"
    assert observed["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    assert observed["draft_embed_weight_is_target_embed"] is True

    # Speculative decoding is lossless: the FP8 draft head changes proposals, never the output.
    assert on["token_ids"] == flag_off_run[2]["token_ids"]

    # The receipt and diagnostics were archived, byte for byte, in a sealed, verifying boot.
    assert boot.status == "sealed"
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    validate_post_share_receipt(receipt)
    assert schemas.errors("runtime-receipt-v2", receipt) == []
    assert len(receipt) == 30
    assert receipt["head_weight"]["shape"] == [hidden, vocab]
    assert receipt["head_weight_scale"]["shape"] == [1]
    # What the worker observed after start is what the plugin archived (but for the phase).
    assert {**observed, "phase": "post_share"} == receipt
    assert schemas.errors("diagnostics-v1", diagnostics) == []
    head = diagnostics["head"]
    assert head["provenance_verified"] is True
    assert (
        head["source_sha256"]
        == head["checkpoint"]["sha256"]
        == tensor_bytes_sha256(pair.assistant)["sha256"]
    )
    assert diagnostics["validation"] == {"passed": True, "reason": None}
    assert Archive(archive).verify().ok


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("ordered", "ordered embeddings bypass LogitsProcessor.quant_method.apply"),
        ("untied", "untied draft embedding/head is outside this alias-safe prototype"),
    ],
)
def test_unsafe_assistants_stop_startup(pairs, tmp_path, kind, reason):
    archive = tmp_path / "archive"
    run = run_engine(tmp_path, pairs[kind], engine_env(tmp_path, flag=True, archive=archive))
    assert run.returncode != 0
    assert run.facts is None
    assert f"HeadFp8EligibilityError: {reason}" in run.stderr
    assert f"draft-head-fp8: refusing to start: {reason}" in run.stderr
    # Refused before anything was captured: no receipt anywhere, half-written or whole.
    assert not any("receipt" in p for p in tree(archive))


def _plant_nan_in_embedding(assistant_dir):
    path = assistant_dir / "model.safetensors"
    raw = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    begin, _ = header["model.embed_tokens.weight"]["data_offsets"]
    at = 8 + length + begin + 2 * 1000  # element 1000, bf16
    raw[at : at + 2] = b"\xc0\x7f"  # bf16 NaN
    path.write_bytes(bytes(raw))


def test_nan_in_the_head_is_refused_at_load(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair", seed=4)
    _plant_nan_in_embedding(pair.assistant)
    archive = tmp_path / "archive"
    run = run_engine(tmp_path, pair, engine_env(tmp_path, flag=True, archive=archive))
    assert run.returncode != 0
    assert "head weight holds NaN or inf" in run.stderr
    assert not any("receipt" in p for p in tree(archive))


def test_multiprocess_engine_captures_the_receipt_in_the_worker(pairs, flag_off_run, tmp_path):
    archive = tmp_path / "archive"
    env = engine_env(tmp_path, flag=True, archive=archive, multiprocess=True)
    run = run_engine(tmp_path, pairs["dense"], env)
    assert run.ok, run.tail(40)
    boot = _only_boot(archive)
    validate_post_share_receipt(json.loads(boot.read_bytes(receipt_path(0))))
    assert run.facts["token_ids"] == flag_off_run[2]["token_ids"]
