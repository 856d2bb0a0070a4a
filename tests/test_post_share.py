"""The post-share hook's archive step, without an engine: the proof kept in one boot, and an
archive that cannot keep it refusing the start with a named error (not an eligibility one).
The hook itself runs in tests/test_engine.py."""

from __future__ import annotations

import json

import pytest

from draft_head_fp8.archive import Archive
from draft_head_fp8.errors import HeadFp8EligibilityError, ProofNotKept
from draft_head_fp8.vllm_plugin import post_share

RECEIPT, RECORD = {"schema": "receipt"}, {"head": {}, "failure": None}


def test_the_proof_is_kept_in_one_boot_and_sealed(tmp_path, monkeypatch, quiet_env):
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(tmp_path / "archive"))
    boot, not_archived = post_share._archive("vllm-test", 1, 0, RECEIPT, RECORD)
    assert not_archived is None
    post_share._seal(boot)
    (kept,) = Archive(tmp_path / "archive").boots()
    assert kept.status == "sealed" and kept.path == boot.path
    receipt = (boot.path / "receipts" / "post_share-rank0.json").read_text()
    assert json.loads(receipt) == RECEIPT


def test_an_archive_that_cannot_keep_the_proof_is_a_named_refusal(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(not_a_folder))
    boot, not_archived = post_share._archive("vllm-test", 1, 0, RECEIPT, RECORD)
    assert boot is None and isinstance(not_archived, ProofNotKept)
    assert not isinstance(not_archived, HeadFp8EligibilityError)
    message = str(not_archived)
    assert message.startswith("cannot archive the post-share receipt (")
    assert message.endswith("); set DRAFT_HEAD_FP8_ARCHIVE to a writable folder")


def test_a_sealed_boot_refuses_a_second_proof(tmp_path, monkeypatch, quiet_env):
    monkeypatch.setenv("DRAFT_HEAD_FP8_ARCHIVE", str(tmp_path / "archive"))
    boot, _ = post_share._archive("vllm-test", 1, 0, RECEIPT, RECORD)
    post_share._seal(boot)
    with pytest.raises(ProofNotKept, match="^cannot archive the post-share receipt"):
        post_share._keep(boot, "receipts/post_share-rank0.json", RECEIPT)
