"""bench/fidelity_families.py on small shapes, so that the script cannot rot silently: the
batched W8A8 emulation is the per-call one, and on a tiny family head and a small heavy-tailed
head the exact pick is the BF16 pick whenever that pick is among the FP8 top-k."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import fidelity_families as ff  # noqa: E402
from bench import heads  # noqa: E402
from bench.fidelity import KS  # noqa: E402
from draft_head_fp8.fp8 import quantize_per_tensor  # noqa: E402
from draft_head_fp8.settings import DEFAULT_RESCORE_TOPK  # noqa: E402


def args(*extra: str):
    return ff.parser().parse_args(["--families", "--shapes", *extra])


def check_picks(picks: dict, rows: int) -> None:
    covered, exact = picks["bf16_pick_in_fp8_top_k"], picks["exact_pick"]
    assert picks["rows"] == rows
    assert picks["exact_pick_missed_in_top_k_rows"] == {str(k): 0 for k in KS}
    # The pick is the BF16 pick exactly when that pick was a candidate.
    assert exact == covered
    assert [covered[str(k)] for k in KS] == sorted(covered[str(k)] for k in KS)


def test_batched_emulation_is_one_head_call_per_batch():
    gen = torch.Generator().manual_seed(1)
    w = (torch.randn(3000, 64, generator=gen) * 0.05).to(torch.bfloat16)
    x = torch.randn(48, 64, generator=gen)
    x[16:32] *= 1000  # one head call's activation scale must not leak into another's
    x = x.to(torch.bfloat16)
    quant = quantize_per_tensor(w)
    ours = ff.emulated_w8a8(x, quant.weight, quant.scale, 16, chunk=700).float()
    calls = [heads.fp8_emulated(x[s : s + 16], quant.weight, quant.scale) for s in (0, 16, 32)]
    theirs = torch.cat(calls).float()
    assert torch.allclose(ours, theirs, rtol=2**-7, atol=0)
    one_scale = heads.fp8_emulated(x, quant.weight, quant.scale).float()
    assert not torch.allclose(ours[:16], one_scale[:16], rtol=2**-7, atol=0)


def test_synthetic_shape_sweep():
    a = args("--rows", "32", "--outliers", "4", "--ratios", "1", "10000")
    entry = ff.run_shape("small", 4096, 64, a)
    assert entry["shape"] == [4096, 64] and len(entry["sweep"]) == 2
    assert entry["emulation_check"]["max_abs_diff"] <= 2**-7 * 64
    low, high = entry["sweep"]
    assert high["row_amax_ratio"] > 1000 * low["row_amax_ratio"]
    assert high["bulk_fraction_subnormal_or_zero"] > low["bulk_fraction_subnormal_or_zero"]
    for point in entry["sweep"]:
        for kind in ("gaussian", "peaked"):
            check_picks(point[kind]["picks"], 32)
    with pytest.raises(ValueError, match="multiple of --batch"):
        ff.run_shape("small", 4096, 64, args("--rows", "20"))


def test_tiny_family_head(tmp_path, capsys, monkeypatch):
    from tools import corpus

    # Two held-out documents, not the whole standard library's docstrings (seconds saved).
    text = "Return a new list containing all items from the iterable in ascending order. " * 3
    few = corpus.Corpus(train=[], heldout=[text, text.upper()], train_modules=0, heldout_modules=1)
    monkeypatch.setattr(corpus, "stdlib_docstring_corpus", lambda: few)
    a = args("--prompts", "2", "--tokens", "16")
    entry = ff.run_tiny("mimo-mtp", a)
    assert entry["head"]["tensor"] == "lm_head.weight" and entry["head"]["folder"] == "target"
    assert entry["head"]["shape"] == [2048, 128]
    assert entry["hidden_rows"] == 2 * 17  # <bos> + 16 tokens per document
    assert 0.5 < entry["rms"] < 2  # the final norm's output (its weight is ones), not its input
    for kernel in ("w8a8", "w8a16"):
        picks = entry["kernels"][kernel]["picks"]
        check_picks(picks, 34)
        assert picks["exact_pick"][str(DEFAULT_RESCORE_TOPK)] >= picks["plain_fp8_pick"]
    result = ff.merge(tmp_path / "r.json", "tiny_heads", {"mimo-mtp": entry})
    result = ff.merge(tmp_path / "r.json", "synthetic_shapes", {})
    assert set(result["tiny_heads"]) == {"mimo-mtp"}
    ff.print_tables(result)
    assert "| mimo-mtp, 2048 x 128" in capsys.readouterr().out


def test_shapes_by_name_or_size():
    assert ff.parse_shape("deepseek-v3") == ("deepseek-v3", 129280, 7168)
    assert ff.parse_shape("100x8") == ("100x8", 100, 8)
    with pytest.raises(Exception, match="VOCABxHIDDEN"):
        ff.parse_shape("deepseek")
