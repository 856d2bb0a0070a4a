"""A real server under concurrent traffic, a weight update while requests are in flight, and an
ordinary stop (SIGTERM to the API server, as ``kill`` and Kubernetes send it): flag off, then
flag on, on the shipped trained pair (its drafts are accepted), the same requests to each.

Two server starts for the whole module (``served``). Every request is greedy, bounded (count,
tokens, a timeout each) and sent over loopback only.

Batching: a greedy completion can depend on which requests share its batch (the sums of a batch
are not the sums of one row), and two runs at the same concurrency batch differently. So each
prompt is asked of the flag-off server twice, alone and under load; where those two agree, flag
off repeats itself for that prompt whatever the batch, and there flag on must give the same
text. The prompts where flag off does not repeat itself are counted, and must stay a minority.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from engine_support import FLAG_ON, FP8_EVERYWHERE, PROMPTS, engine_env, free_port
from serve_support import Server, unverified_bound
from test_serve import UNI, end_of_serving

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import list_proofs

pytestmark = pytest.mark.engine

# 16 distinct prompts from the demo's four; 8 in flight at once; 16 tokens each.
PROMPTS_16 = [f"{p} {w}" for w in ("and", "so", "then", "but") for p in PROMPTS]
CONCURRENCY, TOKENS, EACH_S, ALL_S = 8, 16, 120, 300
DRAFTS, DONE = "vllm:spec_decode_num_draft_tokens_total", "vllm:request_success_total"


def _ask(server: Server, prompts: list[str]) -> list[object]:
    """Every prompt at once (CONCURRENCY in flight): its text, or the error it got."""
    deadline = time.monotonic() + ALL_S

    def one(prompt: str) -> object:
        try:
            left = max(1.0, min(EACH_S, deadline - time.monotonic()))
            return server.complete(prompt, TOKENS, timeout=left)["choices"][0]["text"]
        except Exception as exc:  # the test compares failures, flag off against flag on
            return f"FAILED {type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, prompts))


def _reload_in_flight(server: Server, target: str) -> tuple[list[object], object]:
    """The prompts in flight, and ``reload_weights`` from the target's folder through vLLM's
    own dev route while they run; (their answers, the route's answer or error)."""
    answers: list[object] = []
    worker = threading.Thread(target=lambda: answers.extend(_ask(server, PROMPTS_16)))
    worker.start()
    time.sleep(1.0)  # requests admitted and decoding
    try:
        body = {"method": "reload_weights", "kwargs": {"weights_path": target}, "timeout": 120}
        reloaded: object = server.post("/collective_rpc", body, timeout=150)
    except Exception as exc:
        reloaded = f"FAILED {type(exc).__name__}: {exc}"
    worker.join(ALL_S + 30)
    return answers, reloaded


@pytest.fixture(scope="module")
def served(tmp_path_factory, shipped):
    runs = {}
    for name, flag in (("off", False), ("on", True)):
        folder = tmp_path_factory.mktemp(f"serve-load-{name}")
        archive = folder / "archive"
        env = engine_env(folder, flag=flag, archive=archive)
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")  # vLLM's default: engine core in its own process
        # vLLM's dev routes (/collective_rpc) for the weight update; the FP8 head at every batch
        # size, so every draft row goes through the certified pick and is counted.
        env.update({"VLLM_SERVER_DEV_MODE": "1", **(FLAG_ON | FP8_EVERYWHERE if flag else {})})
        server = Server(shipped, env, free_port(), folder, UNI, flag=flag)
        run: dict = {"archive": archive}
        try:
            assert server.wait_listening(), server.log()[-4000:]
            if not flag:
                run["alone"] = [_ask(server, [p])[0] for p in PROMPTS_16]
            run["load"] = _ask(server, PROMPTS_16)
            run["in_flight"], run["reloaded"] = _reload_in_flight(server, str(shipped.target))
            run["after"] = _ask(server, PROMPTS_16)
            metrics = server.metrics()
            run["drafts"], run["requests"] = metrics.get(DRAFTS), metrics.get(DONE)
            run["code"] = server.stop(signal.SIGTERM, group=False)
        finally:
            server.kill()
            run["log"] = server.log()
        runs[name] = run
    return runs


def _failed(answers: list[object]) -> set[int]:
    return {i for i, a in enumerate(answers) if str(a).startswith("FAILED")}


def test_no_request_fails_under_load_nor_during_a_weight_update(served):
    off, on = served["off"], served["on"]
    for run in (off, on):
        assert len(run["load"]) == len(run["after"]) == len(PROMPTS_16)
        assert not _failed(run["load"]) and not _failed(run["after"]), run["log"][-3000:]
        assert not str(run["reloaded"]).startswith("FAILED"), run["reloaded"]
    assert len(on["in_flight"]) == len(PROMPTS_16)
    assert _failed(on["in_flight"]) <= _failed(off["in_flight"]), on["in_flight"]


def test_completions_equal_flag_off_where_flag_off_repeats_itself(served):
    off, on = served["off"], served["on"]
    stable = [i for i, (a, b) in enumerate(zip(off["alone"], off["load"])) if a == b]
    assert len(stable) > len(PROMPTS_16) // 2, (off["alone"], off["load"])
    for phase in ("load", "after"):
        assert [on[phase][i] for i in stable] == [off[phase][i] for i in stable], phase
    assert any(off["load"][i] for i in stable)  # texts, not empty strings


def test_the_update_in_flight_is_proven_and_sigterm_seals_the_boot_with_every_draft_row(served):
    off, on = served["off"], served["on"]
    assert on["code"] == off["code"] == 0, on["log"][-3000:]
    assert "post-share receipt passed (v" in on["log"]
    # SIGTERM to the API server: every record sealed, verify ok, the last one the boot's counts.
    last, record = end_of_serving(on["archive"])
    (boot,) = Archive(on["archive"]).boots()
    kinds = [p["update"]["kind"] for p in list_proofs(boot)]
    assert kinds == ["reload_weights", "end_of_serving"], kinds
    counts = record["certificate"]["counts"]
    # Every draft row the server verified (vLLM's own counter) was picked by the certified pick,
    # plus the rows drafted at a request's end that vLLM never verifies; each pick was proven
    # the BF16 head's: none served uncertified.
    picked, drafts, requests = sum(counts.values()), on["drafts"], on["requests"]
    assert requests == 3 * len(PROMPTS_16), requests
    assert drafts and drafts <= picked <= drafts + unverified_bound(int(requests)), (
        counts, drafts, requests,
    )  # fmt: skip
    assert counts["uncertified"] == 0
    # Flag off keeps no archive and says nothing of the plugin: nothing was installed.
    assert not off["archive"].exists() or not any(off["archive"].iterdir())
    assert "draft-head-fp8:" not in off["log"]
