"""Fixtures shared between test modules. Engine runs above all: each real engine start costs
10-60 s on 2 cores, so the flag-off and flag-on runs of the shipped pair are made once per session
and read by every test that compares against them."""

from __future__ import annotations

import os

import pytest
from engine_support import serve

from draft_head_fp8.archive import Archive
from draft_head_fp8.tiny import shipped_pair


@pytest.fixture(scope="session")
def shipped():
    return shipped_pair()


@pytest.fixture(scope="session")
def tp1_off(shipped, tmp_path_factory):
    return serve(tmp_path_factory.mktemp("tp1-off"), shipped, flag=False)


@pytest.fixture(scope="session")
def tp1_on(shipped, tmp_path_factory):
    return serve(tmp_path_factory.mktemp("tp1-on"), shipped, flag=True)


@pytest.fixture
def quiet_env(monkeypatch):
    # boot.json records VLLM_* / DRAFT_HEAD_FP8_* variables; keep the test boots small and stable.
    for name in list(os.environ):
        if name.startswith(("VLLM_", "DRAFT_HEAD_FP8_")) or name == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(name)


@pytest.fixture
def arc(tmp_path):
    return Archive(tmp_path / "archive")
