"""Engine runs shared between test modules: each real engine start costs 10-60 s on 2 cores, so
the flag-off and flag-on runs of the shipped pair are made once per session and read by every
test that compares against them."""

from __future__ import annotations

import pytest
from engine_support import serve

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
