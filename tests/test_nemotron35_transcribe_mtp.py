"""Nemotron 3.5 Transcribe's MTP drafter masks a vocabulary suffix after the head (vLLM 0.34's
``Nemotron3_5TranscribeMTP.compute_logits``: ``logits[..., speechlm_output_vocab_size:] = -inf``).
Its record states the suffix from the draft's config; the certified pick then never sees a masked
token, even where the BF16 and the FP8 head's argmax over the whole head is one, and what vLLM's
mask leaves is the BF16 head's argmax over the rest. Without the rule the same pick, masked by
vLLM afterwards, drafts other tokens. (No engine: its engine run is
tests/test_shared_head_families.py's; ``check`` on its tiny checkpoint, here.)"""

from __future__ import annotations

import shutil
import types

import pytest

torch = pytest.importorskip("torch")

from bench import heads  # noqa: E402
from draft_head_fp8.certificate import (  # noqa: E402
    KERNEL_W8A16,
    UNCERTIFIED,
    certified_pick,
    logit_bound,
    row_error_norms,
)
from draft_head_fp8.families import by_name, for_config  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.rescore import exact_logits  # noqa: E402

FAMILY = by_name("nemotron35-transcribe-mtp")
VOCAB, HIDDEN, TOKENS, EXTRA = 512, 64, 48, 10
DRAFTED = VOCAB - EXTRA  # vLLM's speechlm_output_vocab_size: the decoder's vocabulary
# The drafter's config, as vLLM makes it from the target's decoder config.
DRAFT_CONFIG = types.SimpleNamespace(speechlm_output_vocab_size=DRAFTED, vocab_size=VOCAB)


def test_the_record_masks_the_suffix_the_drafters_config_names():
    assert list(FAMILY.masked_tokens(DRAFT_CONFIG, VOCAB)) == list(range(DRAFTED, VOCAB))
    # A head sharded or padded past the vocabulary: only its real tokens are named.
    assert list(FAMILY.masked_tokens(DRAFT_CONFIG, DRAFTED + 3)) == [
        DRAFTED,
        DRAFTED + 1,
        DRAFTED + 2,
    ]
    assert not FAMILY.masked_tokens(types.SimpleNamespace(), VOCAB)  # no field: nothing masked
    assert not by_name("nemotron-h-mtp").masked_tokens(DRAFT_CONFIG, VOCAB)  # no such step


def _head(seed: int = 0):
    """A head whose masked rows lie along a direction every hidden state shares, so that on every
    row the whole head's best tokens, BF16 and FP8, are the masked ones, more of them than the
    pick's candidates (k = 8); and whose drafted rows come in twins 1 % apart, closer than the
    FP8 step, so that the plain FP8 argmax among them is often the other twin."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.nn.functional.normalize(torch.randn(HIDDEN, generator=gen), dim=0)
    w = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05
    w[1:DRAFTED:2] = w[0:DRAFTED:2] * (1 + 0.01 * torch.randn(DRAFTED // 2, HIDDEN, generator=gen))
    w[DRAFTED:] = shared + 0.05 * torch.randn(EXTRA, HIDDEN, generator=gen)
    lean = w[torch.randint(0, DRAFTED, (TOKENS,), generator=gen)]
    x = torch.randn(TOKENS, HIDDEN, generator=gen) + 8 * shared
    x = x + lean / lean.norm(dim=-1, keepdim=True) ** 2 * 2
    return w.to(torch.bfloat16), x.to(torch.bfloat16)


def _drafted(w, x, suppressed):
    """The draft tokens: the certified pick over the FP8 head, then vLLM's mask, then argmax."""
    q = quantize_per_tensor(w)
    bound = logit_bound(
        row_error_norms(w, q, kernel=KERNEL_W8A16), hidden=HIDDEN, kernel=KERNEL_W8A16
    )
    fp8 = heads.fp8_w8a16(x, q.weight, q.scale)
    out = certified_pick(
        fp8.clone(), x, w, k=8, wide_k=16, valid_rows=VOCAB, bound=bound, suppressed=suppressed
    )
    assert int(out.counts[UNCERTIFIED]) == 0
    logits = out.logits.clone()
    logits[..., DRAFTED:] = -torch.inf  # what Nemotron3_5TranscribeMTP.compute_logits does
    return logits.argmax(-1), fp8


def test_a_masked_token_is_never_picked_even_where_it_is_the_argmax():
    w, x = _head()
    every = exact_logits(w, torch.arange(VOCAB).expand(TOKENS, -1), x)
    expected = every[:, :DRAFTED].argmax(-1)  # the BF16 head's draft after vLLM's mask
    masked = torch.tensor(list(FAMILY.masked_tokens(DRAFT_CONFIG, VOCAB)))
    picks, fp8 = _drafted(w, x, masked)
    # The case the rule is for: the whole head's argmax, BF16 and FP8, a masked token.
    assert bool((every.topk(8).indices >= DRAFTED).all())
    assert bool((fp8.argmax(-1) >= DRAFTED).all())
    assert torch.equal(picks, expected)
    # Without the rule the pick's candidates are the masked tokens, vLLM's mask removes them, and
    # the rest of the row is the FP8 scan clamped below them: other tokens are drafted.
    unmasked, _ = _drafted(w, x, None)
    assert int((unmasked != expected).sum()) > 0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from engine_support import shared_pair

    return shared_pair(tmp_path_factory, FAMILY.name)


def test_check_knows_the_tiny_checkpoint_and_finds_it_eligible(pair):
    from test_mtp_family_records import WITH_OP

    from draft_head_fp8.checkpoint import read_config
    from draft_head_fp8.preflight import check_assistant

    config = read_config(pair.target)
    assert config["model_type"] == "nemo_speechlm" and for_config(config, pair.target) is FAMILY
    result = check_assistant(pair.target, None, machine=WITH_OP)
    assert result.family is FAMILY and result.eligible, result.reason
    assert any("reads the target's lm_head" in note for note in result.notes)


def test_check_refuses_a_head_stored_under_nemos_name_without_the_masked_rows(pair, tmp_path):
    """NVIDIA's BF16 checkpoint keeps the head as ``llm.lm_head.weight``, the decoder vocabulary's
    rows only; vLLM pads the 10 masked rows with zeros at load, which no tensor vouches for."""
    from safetensors.torch import load_file, save_file
    from test_mtp_family_records import WITH_OP

    from draft_head_fp8.preflight import check_assistant
    from draft_head_fp8.tiny.common import WEIGHTS

    folder = shutil.copytree(pair.target, tmp_path / "nemo")  # a copy: the pair stays whole
    tensors = load_file(folder / WEIGHTS)
    head = tensors.pop("lm_head.weight")
    tensors["llm.lm_head.weight"] = head[: head.shape[0] - 10].contiguous()
    save_file(tensors, folder / WEIGHTS, metadata={"format": "pt"})
    result = check_assistant(folder, None, machine=WITH_OP)
    assert result.family is FAMILY and not result.eligible
    assert "llm.lm_head.weight" in result.reason and "pads the masked rows" in result.reason


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"llm_config": {"num_nextn_predict_layers": 1}}, None),  # NeMo's config.json (check)
        ({"num_nextn_predict_layers": 1}, None),  # the drafter's (the decoder's config)
        ({"llm_config": {"num_nextn_predict_layers": 0}}, "no MTP layers"),
        ({}, "no MTP layers"),
    ],
)
def test_a_checkpoint_without_mtp_layers_is_refused(config, reason):
    refused = FAMILY.refusal(config)
    assert (refused is None) if reason is None else (reason in refused)
