"""Weights that change while serving (vllm_plugin/updates.py): every weight update proves the draft
head again, in the engine that keeps serving, and no draft pick is ever made from FP8 bytes a
receipt does not describe. Real engines, flag off and on, on the shipped trained pairs (drafts
get accepted, so equal counters count accepted tokens) of both kinds of head, on both engines:

- Llama EAGLE-1 (the target's head): vLLM's ``reload_weights`` from a folder whose head rows are
  rolled, a weight-transfer session of the target (tests/shims/weight_transfer: tensors from a
  file into vLLM's own checkpoint-format path) and of the draft, the target's own
  ``load_weights`` through ``collective_rpc`` with nothing announced, an update that leaves a
  non-finite row (the FP8 head refused with its reason, the BF16 rows serving), and a reload that
  brings the FP8 head back;
- Gemma 4 MTP (the draft's own head): a reload and a transfer of the target, an in-place write,
  sleep and ``wake_up`` (vLLM's CPU worker ignores sleep: the decision is tested), and a draft
  weight update, which vLLM breaks for this drafter (flag off too): refused before a byte moves.

After each update every draft-head call's pick is checked against the BF16 head the engine
should hold then, read from the update's own files on disk; vLLM's counters and texts against a
flag-off run making the same updates.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from engine_support import (
    ENGINES,
    FP8_EVERYWHERE,
    SHIMS,
    V034,
    V1,
    serve,
)
from safetensors.torch import load_file, save_file

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import RECORD, list_proofs, proof_folder
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import RANKS_PATH, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.families import by_name
from draft_head_fp8.policy import draft_update_refused
from draft_head_fp8.tiny import shipped_pair

pytestmark = pytest.mark.engine
TRANSFER = ("--engine-option", 'weight_transfer_config={"backend": "dhfp8-files"}')
WEIGHT_TRANSFER_SHIM = str(SHIMS / "weight_transfer")
TOKENS = ("--max-tokens", "12")
NAN_ROW = 5
NOT_FINITE = (
    f"head weight holds NaN or inf (first in row {NAN_ROW}); refusing to quantize it to FP8"
)


def _changed(folder: Path, out: Path, change) -> Path:
    """A copy of a checkpoint folder with its tensors passed through ``change``."""
    shutil.copytree(folder, out)
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


def _rolled(names):
    def change(tensors):
        for name in names:
            tensors[name] = torch.roll(tensors[name], 1, 0).contiguous()

    return change


def _not_finite(tensors):
    tensors["lm_head.weight"][NAN_ROW] = float("nan")


def _ref(target, assistant) -> dict:
    return {"target": str(target), "assistant": str(assistant)}


def eagle1_steps(pair, root: Path) -> tuple[list, dict]:
    rolled = _changed(pair.target, root / "target-rolled", _rolled(["lm_head.weight"]))
    broken = _changed(pair.target, root / "target-nan", _not_finite)
    original, head = _ref(pair.target, pair.assistant), ["lm_head.weight"]
    steps = [
        {"kind": "reload_weights", "weights_path": str(rolled),
         "reference": _ref(rolled, pair.assistant)},
        {"kind": "transfer", "model": "target", "file": str(pair.target / "model.safetensors"),
         "names": head, "reference": original},
        {"kind": "transfer", "model": "draft", "file": str(pair.assistant / "model.safetensors"),
         "reference": original},
        {"kind": "load_weights", "model": "target", "file": str(rolled / "model.safetensors"),
         "names": head, "reference": _ref(rolled, pair.assistant)},
        {"kind": "transfer", "model": "target", "file": str(broken / "model.safetensors"),
         "names": head, "reference": _ref(broken, pair.assistant)},
        {"kind": "reload_weights", "weights_path": str(pair.target), "reference": original},
    ]  # fmt: skip
    return steps, {"rolled": rolled, "broken": broken}


def gemma4_steps(pair, root: Path) -> tuple[list, dict]:
    embed = ["model.embed_tokens.weight"]
    rolled = _changed(pair.target, root / "target-rolled", _rolled(embed))
    draft = _changed(pair.assistant, root / "assistant-rolled", _rolled(embed))
    original = _ref(pair.target, pair.assistant)  # the draft's own head never changes here
    steps = [
        {"kind": "reload_weights", "weights_path": str(rolled), "reference": original},
        {"kind": "transfer", "model": "target", "file": str(pair.target / "model.safetensors"),
         "reference": original},
        {"kind": "load_weights", "model": "target", "file": str(rolled / "model.safetensors"),
         "names": embed, "reference": original},
        {"kind": "sleep", "level": 1, "reference": original},
        # Last, and flag on only: with the flag off vLLM's own update breaks this engine.
        {"kind": "transfer", "model": "draft", "file": str(draft / "model.safetensors"),
         "reference": original},
    ]  # fmt: skip
    return steps, {"rolled": rolled}


STEPS = {"llama-eagle1": eagle1_steps, "gemma4-mtp": gemma4_steps}
CASES = [(f, e) for f in STEPS for e in (V034.name, V1.name)]


class Updated:
    def __init__(self, family: str, engine: str, root: Path) -> None:
        self.family, self.engine = by_name(family), ENGINES[engine]
        self.pair = shipped_pair(family)
        self.steps, self.files = STEPS[family](self.pair, root)
        refused_draft = self.family.draft_updates_refused
        off_steps = self.steps[:-1] if refused_draft else self.steps
        self.off = self._serve(root / "off", flag=False, steps=off_steps)
        self.on = self._serve(root / "on", flag=True, steps=self.steps)

    def _serve(self, tmp: Path, *, flag: bool, steps: list, args: tuple = ()):
        tmp.mkdir()
        (tmp / "steps.json").write_text(json.dumps(steps))
        run = serve(
            tmp, self.pair, flag=flag, env={**FP8_EVERYWHERE, "PYTHONPATH": WEIGHT_TRANSFER_SHIM},
            args=(*TRANSFER, *TOKENS, "--weight-updates", str(tmp / "steps.json"), *args),
            engine=self.engine.name,
        )  # fmt: skip
        assert run.launch.ok, run.launch.tail(60)
        assert self.engine.served(run.facts)
        return run

    def boot(self):
        (boot,) = Archive(self.on.archive).boots()
        return boot

    def receipt(self, proof: int, rank: int = 0) -> dict:
        return json.loads(
            self.boot().read_bytes(f"{proof_folder(proof)}/{receipt_path(rank, 'post_update')}")
        )


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "-".join(c))
def updated(request, tmp_path_factory):
    family, engine = request.param
    return Updated(family, engine, tmp_path_factory.mktemp(f"updates-{family}-{engine}"))


def _deltas(run) -> list[dict]:
    """vLLM's counters over each step alone (they count from the engine's start)."""
    counts = [run.facts["spec_decode"]] + [s["spec_decode"] for s in run.facts["weight_updates"]]
    keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    return [{k: b[k] - a[k] for k in keys} for a, b in zip(counts, counts[1:])]


def test_after_every_update_each_pick_is_the_bf16_head_the_engine_holds(updated):
    for step in updated.on.facts["weight_updates"]:
        agreement = step["draft_agreement"]
        assert agreement["steps"] > 20 and agreement["agree"] == agreement["steps"], step["step"]


def test_texts_and_counters_equal_flag_off_after_every_announced_update(updated):
    on, off = updated.on.facts["weight_updates"], updated.off.facts["weight_updates"]
    deltas = list(zip(_deltas(updated.on), _deltas(updated.off)))
    for i, (a, b) in enumerate(zip(on, off)):
        assert a["error"] is None and b["error"] is None, (a["error"], b["error"])
        assert a["texts"] == b["texts"] and a["token_ids"] == b["token_ids"], a["step"]["kind"]
        if a["step"]["kind"] != "load_weights":  # see the in-place test below
            assert deltas[i][0] == deltas[i][1], a["step"]["kind"]
    # Trained pairs: drafts accepted (how many moves with the CPU kind's numerics: 38 on the
    # AVX2 kind's kernels for Gemma 4's pair, more on AVX512).
    assert sum(d["num_accepted_tokens"] for d, _ in deltas) > 20


def test_every_update_is_one_more_proof_sealed_in_the_same_boot(updated):
    boot = updated.boot()
    manifest = boot.manifest
    assert not any(f["path"].startswith("proofs/") for f in manifest["files"])
    *proofs, end = list_proofs(boot)
    assert end["update"]["kind"] == "end_of_serving" and end["status"] == "sealed"
    assert [p["proof"] for p in proofs] == [p["update"]["number"] for p in proofs]
    assert len(proofs) == len(updated.steps) - (1 if updated.family.draft_updates_refused else 0)
    assert all(p["status"] == "sealed" for p in proofs)
    report = Archive(updated.on.archive).verify()
    assert report.ok, report.problems
    kinds = {"reload_weights": "reload_weights", "transfer": "weight_transfer",
             "load_weights": "load_weights", "sleep": "wake_up"}  # fmt: skip
    for proof, step in zip(proofs, updated.steps):
        receipt = updated.receipt(proof["proof"])
        assert receipt["weight_update"]["kind"] == kinds[step["kind"]]
        assert receipt["weight_update"]["announced"] is (step["kind"] != "load_weights")
        assert receipt["target_written_by_plugin"] is False
        assert receipt["proof"] == proof["proof"] and receipt["phase"] == "post_update"
        # The rows hashed are what the update wrote, read here from its own file.
        reference = Path(step["reference"]["target" if _shares(updated) else "assistant"])
        tensor = updated.family.head.tensor_for(tied=not _shares(updated))
        assert receipt["head_rows_sha256"] == tensor_bytes_sha256(reference, tensor)["sha256"]
        raw = boot.read_bytes(f"{proof_folder(proof['proof'])}/{RECORD}")
        assert json.loads(raw)["proof"] == proof["proof"]


def _shares(updated) -> bool:
    return updated.family.shares_target_head


def test_a_reload_from_a_folder_is_vouched_for_by_that_folder(updated):
    receipt = updated.receipt(1)  # reload_weights(weights_path=<rolled copy>)
    assert receipt_verdict(receipt) is None
    source = receipt["head_source"]
    assert source["kind"] == "checkpoint"
    # The target's head: the folder reloaded from; the draft's own head: the assistant's own.
    folder = updated.files["rolled"] if _shares(updated) else updated.pair.assistant
    assert Path(source["folder"]) == folder


def test_weights_that_arrive_by_transfer_are_named_by_the_update_and_hashed_as_received(updated):
    receipt = updated.receipt(2)  # the target's transfer session
    assert receipt_verdict(receipt) is None
    if _shares(updated):
        assert receipt["head_source"] == {
            "kind": "weight_update", "update": 2, "sha256": receipt["head_rows_sha256"],
        }  # fmt: skip
    else:  # a transfer of the target leaves the draft's own head as its checkpoint has it
        assert receipt["head_source"]["kind"] == "checkpoint"


def test_an_in_place_write_nobody_announced_is_proven_before_the_next_draft_call(updated):
    index = next(i for i, s in enumerate(updated.steps) if s["kind"] == "load_weights")
    receipt = updated.receipt(index + 1)
    assert receipt_verdict(receipt) is None
    assert receipt["weight_update"]["announced"] is False
    assert receipt["weight_update"]["detail"] == "target load_weights outside any announced update"
    if _shares(updated):
        # Where vLLM's own target head keeps a prepared GEMM copy (its oneDNN handle, or AMX's
        # packed weight: the AVX512 kind), an in-place write leaves it behind: the target serves
        # its old head, with or without the flag (flag off the drafts follow the old head too:
        # none is the written head's), the FP8 draft head the rows as written. Where it runs
        # torch's linear on the weight itself (the AVX2 kind), the target serves the rows as
        # written. The receipt says which.
        prepared = _vllm_prepares_a_gemm_copy()
        assert receipt["target_lm_head_serves_its_weight"] is not prepared
        off = updated.off.facts["weight_updates"][index]["draft_agreement"]
        assert off["agree"] == (0 if prepared else off["steps"]) and off["steps"] > 0


def _vllm_prepares_a_gemm_copy() -> bool:
    """Whether vLLM's CPU head GEMM on this machine reads a copy prepared at load rather than the
    weight itself, asked of vLLM's own dispatch (``dispatch_cpu_unquantized_gemm``) on a head of
    the tiny pair's shape: an in-place write that its output does not see. (oneDNN's handle
    reorders the weight into a copy with AVX512 and reads it in place with AVX2 only.)"""
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Module()
    weight = torch.randn(2048, 128, generator=gen).to(torch.bfloat16)
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    x = torch.randn(1, 128, generator=gen).to(torch.bfloat16)
    before = layer.cpu_linear(x, layer.weight, None).clone()
    with torch.no_grad():
        layer.weight.mul_(2)
    return torch.equal(layer.cpu_linear(x, layer.weight, None), before)


EAGLE1 = [c for c in CASES if c[0] == "llama-eagle1"]
GEMMA4 = [c for c in CASES if c[0] == "gemma4-mtp"]


def _ids(cases):
    return ["-".join(c) for c in cases]


@pytest.mark.parametrize("updated", EAGLE1, ids=_ids(EAGLE1), indirect=True)
def test_an_update_the_fp8_head_cannot_serve_is_refused_and_the_bf16_rows_serve(updated):
    index = next(i for i, s in enumerate(updated.steps) if "target-nan" in s.get("file", ""))
    receipt = updated.receipt(index + 1)
    assert receipt["serving"] == "bf16_rows" and receipt["serving_reason"] == NOT_FINITE
    assert receipt_verdict(receipt) is not None  # a record of the refusal, not a pass
    after = updated.on.facts["weight_updates"][index]
    assert after["draft_agreement"]["agree"] == after["draft_agreement"]["steps"] > 20
    # The next update brings the FP8 head back, proven.
    back = updated.receipt(index + 2)
    assert receipt_verdict(back) is None and back["serving"] == "fp8"


@pytest.mark.parametrize("updated", GEMMA4, ids=_ids(GEMMA4), indirect=True)
def test_sleep_is_ignored_on_cpu_and_wake_up_proves_the_head_unchanged(updated):
    index = next(i for i, s in enumerate(updated.steps) if s["kind"] == "sleep")
    output = updated.on.launch.stdout + updated.on.launch.stderr
    assert "sleep mode is not supported on CPU" in output
    receipt = updated.receipt(index + 1)
    assert receipt_verdict(receipt) is None and receipt["weight_update"]["kind"] == "wake_up"
    assert receipt["head_rows_sha256"] == updated.receipt(index)["head_rows_sha256"]


@pytest.mark.parametrize("updated", GEMMA4, ids=_ids(GEMMA4), indirect=True)
def test_a_draft_update_vllm_breaks_for_this_drafter_is_refused_before_a_byte_moves(updated):
    reason = updated.family.draft_updates_refused
    last = updated.on.facts["weight_updates"][-1]
    assert draft_update_refused(updated.family.title, reason) in last["error"]
    assert last["draft_agreement"]["agree"] == last["draft_agreement"]["steps"] > 20
    assert last["texts"] == updated.on.facts["weight_updates"][-2]["texts"]  # serving on


def test_at_tp2_every_rank_proves_its_shard_again_and_the_ranks_check_each_other(tmp_path):
    pair = shipped_pair("llama-eagle1")
    rolled = _changed(pair.target, tmp_path / "target-rolled", _rolled(["lm_head.weight"]))
    steps = [{"kind": "reload_weights", "weights_path": str(rolled),
              "reference": _ref(rolled, pair.assistant)}]  # fmt: skip
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    run = serve(
        tmp_path, pair, flag=True, env=FP8_EVERYWHERE, engine=V034.name,
        args=("--tensor-parallel-size", "2", *TOKENS, "--weight-updates",
              str(tmp_path / "steps.json")),
    )  # fmt: skip
    assert run.launch.ok, run.launch.tail(60)
    step = run.facts["weight_updates"][0]
    assert step["error"] is None
    assert step["draft_agreement"]["agree"] == step["draft_agreement"]["steps"] > 20
    (boot,) = Archive(run.archive).boots()
    assert Archive(run.archive).verify().ok
    vocab = 2048
    for rank in (0, 1):
        path = f"{proof_folder(1)}/{receipt_path(rank, 'post_update')}"
        receipt = json.loads(boot.read_bytes(path))
        assert receipt_verdict(receipt) is None and receipt["tp_rank"] == rank
        rows = [rank * vocab // 2, (rank + 1) * vocab // 2]
        assert receipt["head_source"]["rows"] == rows
        shard = tensor_bytes_sha256(rolled, "lm_head.weight", rows=tuple(rows))["sha256"]
        assert receipt["head_rows_sha256"] == shard
    ranks = json.loads(boot.read_bytes(f"{proof_folder(1)}/{RANKS_PATH}"))
    assert ranks["passed"] and ranks["tp_size"] == 2
