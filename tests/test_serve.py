"""A real OpenAI-compatible vLLM server process (multiprocess mode, the default), flag on: its
receipt before its first completion, and an ordinary stop (Ctrl-C) that keeps the boot whole.
The server's helpers: ``serve_support``.
"""

from __future__ import annotations

import json
import signal

import pytest
from engine_support import FLAG_ON, FP8_EVERYWHERE, engine_env, free_port, tree
from serve_support import Server, unverified_bound

from draft_head_fp8 import validate_post_share_receipt
from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import list_proofs, proof_folder
from draft_head_fp8.evidence import receipt_path
from draft_head_fp8.tiny import build_tiny_pair

pytestmark = pytest.mark.engine


UNI = ("--distributed-executor-backend", "uni")


def end_of_serving(archive) -> tuple[dict, dict]:
    """The boot's last record (every record sealed, verify ok) and rank 0's diagnostics in it."""
    (boot,) = Archive(archive).boots()
    report = Archive(archive).verify()
    assert report.ok, (report.problems, report.incomplete_proofs)
    proofs = list_proofs(boot)
    assert proofs and all(p["status"] == "sealed" for p in proofs), proofs
    last = proofs[-1]
    assert last["update"]["kind"] == "end_of_serving", last
    path = f"{proof_folder(last['proof'])}/diagnostics/serving-rank0.json"
    return last, json.loads(boot.read_bytes(path))


def test_server_has_a_valid_receipt_before_its_first_completion(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair", seed=5)
    archive = tmp_path / "archive"
    # What serves an FP8 head on this kind of CPU (by default where vLLM has the W8A16 op).
    # The FP8 head at every batch size: every draft row is then counted by the certified pick.
    env = {**engine_env(tmp_path, flag=True, archive=archive), **FLAG_ON, **FP8_EVERYWHERE}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")  # vLLM's default: engine core in its own process
    server = Server(pair, env, free_port(), tmp_path, UNI)
    try:
        assert server.wait_listening(), server.log()[-4000:]
        # Listening, and nothing has been asked yet: the proof must already be on disk.
        boots = Archive(archive).boots()
        assert [b.status for b in boots] == ["sealed"]
        validate_post_share_receipt(json.loads(boots[0].read_bytes(receipt_path(0))))
        answer = server.complete("The quick brown fox", 8)
        assert answer["choices"][0]["text"] != "" or answer["usage"]["completion_tokens"] > 0
        drafts = server.metrics().get("vllm:spec_decode_num_draft_tokens_total")
        # Ctrl-C in a terminal: SIGINT to the whole group, API server and engine core at once.
        code = server.stop(signal.SIGINT, group=True)
    finally:
        server.kill()
    logged = server.log()
    # vLLM's own log says it, as the README promises.
    assert "draft-head-fp8: post-share receipt passed (v" in logged
    # The ordinary stop lost nothing: the end-of-serving record is whole, sealed, and counts
    # every draft row this boot served.
    assert code == 0, logged[-3000:]
    _, record = end_of_serving(archive)
    counts = record["certificate"]["counts"]
    picked = sum(counts.values())
    assert drafts and drafts <= picked <= drafts + unverified_bound(1), (counts, drafts)


def test_tp2_server_stopped_with_sigterm_keeps_every_ranks_counts(tmp_path, shipped):
    """TP 2 (the mp executor: one process per rank under the engine core), SIGTERM to the API
    server: both ranks' end-of-serving diagnostics in one sealed record."""
    archive = tmp_path / "archive"
    env = {**engine_env(tmp_path, flag=True, archive=archive), **FLAG_ON, **FP8_EVERYWHERE}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    tp2 = ("--tensor-parallel-size", "2", "--distributed-executor-backend", "mp")
    server = Server(shipped, env, free_port(), tmp_path, tp2)
    try:
        assert server.wait_listening(), server.log()[-4000:]
        for prompt in ("The quick brown fox", "def main():"):
            assert server.complete(prompt, 16)["usage"]["completion_tokens"] == 16
        drafts = server.metrics().get("vllm:spec_decode_num_draft_tokens_total")
        code = server.stop(signal.SIGTERM, group=False)
    finally:
        server.kill()
    assert code == 0, server.log()[-3000:]
    last, rank0 = end_of_serving(archive)
    assert sorted(f for f in last["files"] if f.startswith("diagnostics/")) == [
        "diagnostics/serving-rank0.json", "diagnostics/serving-rank1.json",
    ]  # fmt: skip
    (boot,) = Archive(archive).boots()
    rank1 = json.loads(
        boot.read_bytes(f"{proof_folder(last['proof'])}/diagnostics/serving-rank1.json")
    )
    # Every rank picks every draft row (the logits are gathered): the same counts on both.
    assert rank0["certificate"]["counts"] == rank1["certificate"]["counts"]
    picked = sum(rank0["certificate"]["counts"].values())
    assert drafts and drafts <= picked <= drafts + unverified_bound(2), (picked, drafts)


def test_server_refuses_to_start_with_an_ordered_assistant(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair", ordered_embeddings=True, seed=6)
    archive = tmp_path / "archive"
    env = engine_env(tmp_path, flag=True, archive=archive)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
    server = Server(pair, env, free_port(), tmp_path, UNI)
    try:
        listened = server.wait_listening()
        server.proc.wait(timeout=60)
    finally:
        server.kill()
    assert not listened, "the server took traffic with an unsafe draft head"
    assert server.proc.returncode != 0
    assert "ordered embeddings bypass LogitsProcessor.quant_method.apply" in server.err.read_text()
    assert not any("receipt" in p for p in tree(archive))
