"""Fidelity of the FP8 draft head against the BF16 head of the same weights.

    python -m bench.fidelity [--vocab 262144] [--hidden 1024] [--ratios 1 10 100 1000 10000]

The FP8 head is computed exactly as the plugin serves it: ``draft_head_fp8.fp8.quantize_per_tensor``
(weight scale = amax / 448, round-to-nearest, saturating e4m3fn), then vLLM's
``PerTensorTorchFP8ScaledMMLinearKernel``: the activations are quantized dynamically per tensor
(vLLM's ``QuantFP8.forward_native``: scale = max|x| / 448 over the whole batch, clamped below at
1 / (448 * 512); ``x * (1 / scale)`` clamped and cast to e4m3fn), then
``torch._scaled_mm(x_fp8, w_fp8.t(), scale_a, scale_b, out_dtype=bfloat16)``. The BF16 head is
``F.linear(x_bf16, w_bf16)`` with a BF16 result, as vLLM's unquantized head computes it.

On CPU ``torch._scaled_mm`` is a slow reference path (about 21 s for 1 x 1024 x 262144), so the
matmul is *emulated* in float32: ``(x_fp8.float() @ w_fp8.float().t()) * (scale_a * scale_b)``,
rounded to bf16. Every value of an e4m3fn tensor is exact in float32, so only the float32
accumulation order can differ from ``_scaled_mm``; the emulation is checked against the real
``torch._scaled_mm`` on a slice in the same run and the difference is reported.

Metrics (FP8 vs BF16 logits, per hidden-state row, averaged): top-1 agreement (same argmax; also
"up to ties": the FP8 pick has BF16's maximal logit, since BF16 logits tie often), top-5 overlap,
KL(softmax(bf16) || softmax(fp8)), max and mean |logit error|.

(a) The real tiny pair (``draft_head_fp8/data/tiny_pair``): hidden states are the assistant's
final-normed draft hidden states (what vLLM feeds the head), computed in pure torch/transformers
with ``tools.draft_replay`` on held-out prompts followed by the target's greedy continuation,
three free-running draft steps per position, as vLLM drafts.

(b) Synthetic heavy-tailed heads, vocab x hidden (default 262144 x 1024, the Gemma 4 assistant
head): rows ~ N(0, s), and ``--outliers`` rows scaled by ``r`` (10-10000x norm), swept over ``r``.
Per-tensor scaling gives every row the range the largest row sets: the median row uses only
1/ratio of it. Metrics are over the *bulk* rows (all but the outliers): the outlier rows set the
scale and keep full FP8 resolution, and with random hidden states their huge logits would win every
argmax and make agreement trivially perfect. Writes bench/results/fidelity.json and
docs/fidelity.png.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench import heads
from draft_head_fp8.fp8 import quantize_per_tensor
from draft_head_fp8.rescore import rescore_top_k

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------


class Totals:
    """Accumulates per-row metrics over batches."""

    def __init__(self) -> None:
        self.rows = 0
        self.top1 = 0.0
        self.top1_ties = 0.0
        self.top5 = 0.0
        self.kl_sum = 0.0
        self.kl_max = 0.0
        self.max_err = 0.0
        self.abs_err_sum = 0.0
        self.elements = 0
        self.max_ref = 0.0

    def add(self, ref: torch.Tensor, test: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        r = ref.to(torch.float32)
        t = test.to(torch.float32)
        if keep is not None:
            r = r[:, keep]
            t = t[:, keep]
        n = r.shape[0]
        r_arg = r.argmax(-1)
        t_arg = t.argmax(-1)
        self.top1 += float((r_arg == t_arg).sum())
        self.top1_ties += float((r.gather(1, t_arg[:, None]).squeeze(1) == r.max(-1).values).sum())
        r5 = r.topk(5, dim=-1).indices
        t5 = t.topk(5, dim=-1).indices
        self.top5 += float((r5[:, :, None] == t5[:, None, :]).any(-1).sum()) / 5
        lr = F.log_softmax(r, dim=-1)
        lt = F.log_softmax(t, dim=-1)
        kl = (lr.exp() * (lr - lt)).sum(-1).clamp(min=0)
        self.kl_sum += float(kl.sum())
        self.kl_max = max(self.kl_max, float(kl.max()))
        err = (r - t).abs()
        self.max_err = max(self.max_err, float(err.max()))
        self.abs_err_sum += float(err.sum(dtype=torch.float64))
        self.elements += err.numel()
        self.max_ref = max(self.max_ref, float(r.abs().max()))
        self.rows += n

    def result(self) -> dict:
        n = max(1, self.rows)
        return {
            "rows": self.rows,
            "top1_agreement": self.top1 / n,
            "top1_agreement_up_to_ties": self.top1_ties / n,
            "top5_overlap": self.top5 / n,
            "kl_bf16_fp8_mean": self.kl_sum / n,
            "kl_bf16_fp8_max": self.kl_max,
            "max_abs_logit_error": self.max_err,
            "mean_abs_logit_error": self.abs_err_sum / max(1, self.elements),
            "max_abs_logit": self.max_ref,
        }


KS = (1, 2, 4, 8)


class Picks:
    """Exact draft tokens: how often the BF16 head's token is among the FP8 top-k, and how often
    the exact pick (those k rescored from the BF16 rows, ``rescore_top_k``) is the BF16 head's
    token (exactly, and up to ties in BF16); and on how many rows the BF16 token was a candidate
    and the exact pick still chose another (never, if the rescoring is exact)."""

    def __init__(self) -> None:
        self.rows = 0
        self.plain = 0
        self.in_top = dict.fromkeys(KS, 0)
        self.pick = dict.fromkeys(KS, 0)
        self.pick_ties = dict.fromkeys(KS, 0)
        self.missed_in_top = dict.fromkeys(KS, 0)

    def add(self, ref, fp8, x, w, keep=None) -> None:
        if keep is not None:  # metrics over the bulk rows: the others are never a candidate
            ref = ref.masked_fill(~keep, float("-inf"))
            fp8 = fp8.masked_fill(~keep, float("-inf"))
        r = ref.to(torch.float32)
        best, best_value = r.argmax(-1), r.max(-1).values
        self.plain += int((fp8.argmax(-1) == best).sum())
        for k in KS:
            covered = (fp8.topk(k, -1).indices == best[:, None]).any(-1)
            self.in_top[k] += int(covered.sum())
            got = rescore_top_k(fp8.clone(), x, w, k=k, valid_rows=w.shape[0]).argmax(-1)
            self.pick[k] += int((got == best).sum())
            self.missed_in_top[k] += int((covered & (got != best)).sum())
            self.pick_ties[k] += int((r.gather(1, got[:, None]).squeeze(1) == best_value).sum())
        self.rows += int(ref.shape[0])

    def result(self) -> dict:
        n = max(1, self.rows)
        return {
            "rows": self.rows,
            "plain_fp8_pick": self.plain / n,
            "bf16_pick_in_fp8_top_k": {str(k): v / n for k, v in self.in_top.items()},
            "exact_pick": {str(k): v / n for k, v in self.pick.items()},
            "exact_pick_up_to_ties": {str(k): v / n for k, v in self.pick_ties.items()},
            "exact_pick_missed_in_top_k_rows": {str(k): v for k, v in self.missed_in_top.items()},
        }


def fp8_exponent_stats(w_fp8: torch.Tensor, keep_rows: torch.Tensor | None = None) -> dict:
    """How many weights land in e4m3fn's zero/subnormal range (exponent field 0), where the
    3-bit mantissa is no longer relative precision: the cost of a per-tensor scale."""
    raw = w_fp8.view(torch.uint8)
    rows = torch.arange(raw.shape[0]) if keep_rows is None else keep_rows.nonzero().squeeze(1)
    total = exp_zero = zero = 0
    # A bounded piece at a time: a whole-tensor bool ``sum`` goes through int64 (8 bytes per
    # weight: 7.4 GB for a 129280 x 7168 head).
    step = max(1, (1 << 24) // max(1, raw.shape[1]))
    for start in range(0, rows.numel(), step):
        piece = raw[rows[start : start + step]]
        total += piece.numel()
        exp_zero += int(torch.count_nonzero((piece & 0x78) == 0))
        zero += int(torch.count_nonzero((piece & 0x7F) == 0))
    return {"fraction_subnormal_or_zero": exp_zero / total, "fraction_zero": zero / total}


# ------------------------------------------------------------------------------------------
# (a) the real tiny pair
# ------------------------------------------------------------------------------------------


def real_pair_hidden_states(prompts: int, new_tokens: int, pair_dir: Path | None = None):
    from transformers import AutoTokenizer, Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    from draft_head_fp8.tiny import TinyPair, shipped_pair
    from tools import corpus, draft_replay

    pair = (
        shipped_pair()
        if pair_dir is None
        else TinyPair(pair_dir / "target", pair_dir / "assistant")
    )
    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target = Gemma4ForCausalLM.from_pretrained(pair.target, dtype=torch.bfloat16).float().eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(
        pair.assistant, dtype=torch.bfloat16
    ).eval()
    head_w = (
        assistant.lm_head.weight.detach().to(torch.bfloat16).clone()
    )  # tied: the draft embedding
    assistant = assistant.float()
    prompt_ids = corpus.heldout_prompts(
        tokenizer, corpus.stdlib_docstring_corpus(), count=prompts, prompt_tokens=24
    )
    hidden: list[torch.Tensor] = []
    with torch.no_grad():
        for prompt in prompt_ids:
            seq = prompt + draft_replay.greedy_continuation(target, prompt, new_tokens)
            tokens = torch.tensor([seq + [corpus.PAD] * (draft_replay.DRAFT_STEPS + 1)])
            tp = draft_replay.target_pass(target, tokens)
            queries = torch.arange(len(prompt) - 1, len(seq) - 1).unsqueeze(0)
            steps: list[torch.Tensor] = []
            draft_replay.unrolled_draft(
                assistant,
                target,
                tokens,
                tp,
                draft_replay.DRAFT_STEPS,
                queries,
                teacher_forced=False,
                hidden_out=steps,
            )
            hidden.extend(h[0].to(torch.bfloat16) for h in steps)  # vLLM feeds the head bf16
    x = torch.cat(hidden)
    info = {
        "pair": str(pair.assistant.parent.relative_to(ROOT))
        if pair.assistant.is_relative_to(ROOT)
        else str(pair.assistant.parent),
        "prompts": len(prompt_ids),
        "new_tokens": new_tokens,
        "draft_steps": draft_replay.DRAFT_STEPS,
        "hidden_rows": int(x.shape[0]),
        "head_shape": [int(d) for d in head_w.shape],
    }
    return x, head_w, info


def run_real(args) -> dict:
    started = time.perf_counter()
    x, w, info = real_pair_hidden_states(args.real_prompts, args.real_new_tokens, args.pair)
    quant = quantize_per_tensor(w)
    w_fp8 = quant.weight
    info.update(
        {
            "row_amax_max": quant.row_amax_max,
            "row_amax_median": quant.row_amax_median,
            "row_amax_ratio": quant.row_amax_ratio,
            "weight_scale": float(quant.scale[0]),
            **fp8_exponent_stats(w_fp8),
        }
    )
    by_batch = {}
    for batch in args.real_batches:
        fp8_vs_bf16 = Totals()
        bf16_vs_fp32 = Totals()
        picks = {"w8a8": Picks(), "w8a16": Picks()}
        for start in range(0, x.shape[0], batch):
            xb = x[start : start + batch]
            ref = heads.bf16(xb, w)
            w8a8 = heads.fp8_emulated(xb, w_fp8, quant.scale)
            fp8_vs_bf16.add(ref, w8a8)
            bf16_vs_fp32.add(heads.fp32(xb, w), ref)
            picks["w8a8"].add(ref, w8a8, xb, w)
            picks["w8a16"].add(ref, heads.fp8_w8a16(xb, w_fp8, quant.scale), xb, w)
        by_batch[str(batch)] = {
            "fp8_vs_bf16": fp8_vs_bf16.result(),
            "picks": {name: acc.result() for name, acc in picks.items()},
        }
        info["bf16_vs_fp32_baseline"] = bf16_vs_fp32.result()
    # The emulation against the real torch._scaled_mm, on this head, at the largest batch.
    batch = max(args.real_batches)
    rows = min(x.shape[0], args.scaled_mm_rows)
    diff = 0.0
    equal = 0
    total = 0
    t0 = time.perf_counter()
    calls = 0
    for start in range(0, rows, batch):
        xb = x[start : min(rows, start + batch)]
        real = heads.fp8_scaled_mm(xb, w_fp8, quant.scale).to(torch.float32)
        emu = heads.fp8_emulated(xb, w_fp8, quant.scale).to(torch.float32)
        diff = max(diff, float((real - emu).abs().max()))
        equal += int((real == emu).sum())
        total += real.numel()
        calls += 1
    info["scaled_mm_check"] = {
        "rows": rows,
        "batch": batch,
        "max_abs_diff_emulated_vs_scaled_mm": diff,
        "fraction_bitwise_equal": equal / max(1, total),
        "scaled_mm_seconds_per_call": round((time.perf_counter() - t0) / max(1, calls) / 2, 4),
    }
    info["by_activation_batch"] = by_batch
    info["seconds"] = round(time.perf_counter() - started, 1)
    return info


# ------------------------------------------------------------------------------------------
# (b) synthetic heavy-tailed heads
# ------------------------------------------------------------------------------------------


def synthetic_hidden_states(w: torch.Tensor, keep: torch.Tensor, rows: int, logit_std: float, gen):
    """Two kinds of hidden states, ``rows`` each, bf16:

    - ``gaussian``: N(0, 1) per element. No token is preferred: the top-1 competes with ~vocab
      near-tied bulk logits, the hardest case for top-1 agreement;
    - ``peaked``: the same plus a component along one random bulk token's row, sized so that its
      logit exceeds the expected bulk maximum by about two logit standard deviations: a confident
      prediction, as a trained head mostly makes.
    """
    vocab, hidden = w.shape
    gaussian = torch.randn(rows, hidden, generator=gen)
    bulk = keep.nonzero().squeeze(1)
    tokens = bulk[torch.randint(0, bulk.numel(), (rows,), generator=gen)]
    rows_w = w[tokens].to(torch.float32)
    norms = rows_w.norm(dim=-1, keepdim=True)
    boost = logit_std * (math.sqrt(2 * math.log(vocab)) + 2.0)
    peaked = torch.randn(rows, hidden, generator=gen) + rows_w / norms * (boost / norms)
    return (
        {"gaussian": gaussian.to(torch.bfloat16), "peaked": peaked.to(torch.bfloat16)},
        tokens,
        boost,
    )


def run_synthetic(args) -> dict:
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    vocab, hidden = args.vocab, args.hidden
    sigma = args.logit_std / math.sqrt(hidden)  # bulk logits ~ N(0, logit_std) for x ~ N(0, 1)
    w = torch.empty(vocab, hidden, dtype=torch.bfloat16)
    step = 16384
    for start in range(0, vocab, step):
        rows = min(step, vocab - start)
        w[start : start + rows] = (torch.randn(rows, hidden, generator=gen) * sigma).to(
            torch.bfloat16
        )
    outliers = torch.randperm(vocab, generator=gen)[: args.outliers]
    keep = torch.ones(vocab, dtype=torch.bool)
    keep[outliers] = False
    base_rows = w[outliers].clone()
    xs, _, boost = synthetic_hidden_states(w, keep, args.rows, args.logit_std, gen)

    # The bulk's BF16 logits never change across the sweep (only outlier rows are rescaled).
    refs = {kind: heads.bf16(x, w) for kind, x in xs.items()}
    baseline = {}
    for kind, x in xs.items():
        t = Totals()
        t.add(heads.fp32(x, w), refs[kind], keep)
        baseline[kind] = t.result()

    sweep = []
    scaled_mm_check = None
    for r in args.ratios:
        t0 = time.perf_counter()
        w[outliers] = (base_rows.to(torch.float32) * r).to(torch.bfloat16)
        quant = quantize_per_tensor(w)
        point = {
            "outlier_scale": r,
            "row_amax_max": quant.row_amax_max,
            "row_amax_median": quant.row_amax_median,
            "row_amax_ratio": quant.row_amax_ratio,
            "weight_scale": float(quant.scale[0]),
            **{f"bulk_{k}": v for k, v in fp8_exponent_stats(quant.weight, keep).items()},
        }
        for kind, x in xs.items():
            totals, picks = Totals(), {"w8a8": Picks(), "w8a16": Picks()}
            for start in range(0, x.shape[0], args.batch):
                xb = x[start : start + args.batch]
                ref = refs[kind][start : start + args.batch]
                w8a8 = heads.fp8_emulated(xb, quant.weight, quant.scale)
                totals.add(ref, w8a8, keep)
                picks["w8a8"].add(ref, w8a8, xb, w, keep)
                w8a16 = heads.fp8_w8a16(xb, quant.weight, quant.scale)
                picks["w8a16"].add(ref, w8a16, xb, w, keep)
            point[kind] = totals.result()
            point[f"{kind}_picks"] = {name: acc.result() for name, acc in picks.items()}
        point["seconds"] = round(time.perf_counter() - t0, 1)
        if scaled_mm_check is None:
            cols = args.scaled_mm_vocab
            xb = xs["gaussian"][: args.batch]
            real = heads.fp8_scaled_mm(xb, quant.weight[:cols], quant.scale).to(torch.float32)
            emu = heads.fp8_emulated(xb, quant.weight[:cols], quant.scale).to(torch.float32)
            scaled_mm_check = {
                "shape": [int(xb.shape[0]), hidden, cols],
                "max_abs_diff_emulated_vs_scaled_mm": float((real - emu).abs().max()),
                "fraction_bitwise_equal": float((real == emu).float().mean()),
            }
        sweep.append(point)
        g, pk = point["gaussian"], point["peaked"]
        print(
            f"  r={r:>7g}: row amax ratio {point['row_amax_ratio']:9.1f}  "
            f"top-1 gaussian {g['top1_agreement']:.4f} "
            f"peaked {pk['top1_agreement']:.4f}  "
            f"KL {g['kl_bf16_fp8_mean']:.2e}/{pk['kl_bf16_fp8_mean']:.2e}  "
            f"max|err| {g['max_abs_logit_error']:.3f}  ({point['seconds']} s)",
            flush=True,
        )
        del quant
    return {
        "vocab": vocab,
        "hidden": hidden,
        "bulk_row_std": sigma,
        "bulk_logit_std": args.logit_std,
        "outlier_rows": args.outliers,
        "hidden_rows_per_kind": args.rows,
        "peaked_logit_boost": boost,
        "activation_batch": args.batch,
        "hidden_state_kinds": {
            "gaussian": "N(0, 1) per element: no preferred token, "
            "top-1 among ~vocab near-ties (hardest)",
            "peaked": "N(0, 1) + a component along one random bulk row: "
            "its logit ~ expected bulk max + 2 std",
        },
        "metrics_over": "bulk rows only (all but the outlier rows)",
        "bf16_vs_fp32_baseline": baseline,
        "scaled_mm_check": scaled_mm_check,
        "sweep": sweep,
        "seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    syn = result["synthetic"]
    sweep = syn["sweep"]
    ratio = [p["row_amax_ratio"] for p in sweep]
    real = result["real_pair"]
    real_point = real["by_activation_batch"][str(max(int(b) for b in real["by_activation_batch"]))][
        "fp8_vs_bf16"
    ]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.9))
    panels = [
        ("top-1 agreement with BF16", "top1_agreement", False),
        ("KL(bf16 || fp8), mean per row", "kl_bf16_fp8_mean", True),
        ("max |logit error|", "max_abs_logit_error", True),
    ]
    for ax, (title, key, logy) in zip(axes, panels):
        for n, (kind, style) in enumerate((("gaussian", "o-"), ("peaked", "^-"))):
            ax.plot(
                ratio,
                [p[kind][key] for p in sweep],
                style,
                color=f"C{n}",
                label=f"synthetic {syn['vocab']}x{syn['hidden']}, {kind} hidden states",
            )
            base = syn["bf16_vs_fp32_baseline"][kind][key]
            if base > 0 or not logy:
                ax.axhline(base, ls=":", lw=1, color=f"C{n}")
        ax.plot(
            [real["row_amax_ratio"]],
            [real_point[key]],
            "s",
            color="C3",
            ms=8,
            label=f"trained tiny pair, head {real['head_shape'][0]}x{real['head_shape'][1]}",
        )
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("row amax ratio (largest / median row)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    ax = axes[3]
    ax.plot(ratio, [100 * p["bulk_fraction_subnormal_or_zero"] for p in sweep], "o-", color="C2")
    ax.set_xscale("log")
    ax.set_xlabel("row amax ratio (largest / median row)")
    ax.set_title("bulk weights in FP8 subnormal/zero range (%)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(
        "Per-tensor FP8 (e4m3fn) draft head vs BF16 head (dotted: BF16 vs exact FP32)", fontsize=11
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument(
        "--ratios", type=float, nargs="+", default=[1, 10, 100, 1000, 3000, 10000, 30000, 100000]
    )
    parser.add_argument("--outliers", type=int, default=32, help="heavy rows in the synthetic head")
    parser.add_argument("--rows", type=int, default=64, help="synthetic hidden-state rows per kind")
    parser.add_argument(
        "--batch", type=int, default=16, help="rows per head call (activation scale)"
    )
    parser.add_argument("--logit-std", type=float, default=4.0)
    parser.add_argument(
        "--scaled-mm-vocab", type=int, default=4096, help="vocab slice for the _scaled_mm check"
    )
    parser.add_argument("--real-prompts", type=int, default=16)
    parser.add_argument("--real-new-tokens", type=int, default=64)
    parser.add_argument("--real-batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--scaled-mm-rows", type=int, default=256)
    parser.add_argument(
        "--pair",
        type=Path,
        default=None,
        help="folder with target/ and assistant/ (default: the shipped trained pair)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fidelity.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "fidelity.png")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    print("(a) trained tiny pair: draft hidden states from a real forward pass ...", flush=True)
    real = run_real(args)
    print(
        f"(b) synthetic heavy-tailed heads {args.vocab} x {args.hidden}, "
        "sweep over outlier scale ...",
        flush=True,
    )
    synthetic = run_synthetic(args)
    result = {
        "schema": "draft-head-fp8-bench-fidelity/v2",
        "method": {
            "weight": "draft_head_fp8.fp8.quantize_per_tensor "
            "(scale = amax/448, e4m3fn, RNE, saturating)",
            "activation": "vLLM QuantFP8 dynamic per-tensor: "
            "scale = max|x|/448 (>= 1/(448*512)) over the rows of one head call",
            "matmul": "torch._scaled_mm semantics emulated in float32 "
            "(x_fp8.float() @ w_fp8.float().t() * scale_a*scale_b, bf16 out); "
            "checked against the real torch._scaled_mm on a slice",
            "reference": "F.linear(x_bf16, w_bf16), bf16 out (vLLM's unquantized head)",
        },
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "real_pair": real,
        "synthetic": synthetic,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.plot)
    print_tables(result)
    print_pick_tables(result)
    print(f"total {result['seconds_total']} s; wrote {args.out} and {args.plot}")
    return 0


def print_tables(result: dict) -> None:
    real = result["real_pair"]
    print(
        f"\n(a) trained tiny pair, head {real['head_shape'][0]} x {real['head_shape'][1]}, "
        f"{real['hidden_rows']} draft hidden states, row amax ratio {real['row_amax_ratio']:.2f}"
    )
    print(
        "| FP8 vs BF16, activation batch | top-1 | top-1 up to ties | top-5 overlap "
        "| KL mean | KL max | max abs err | mean abs err |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")

    def cells(m):
        return (
            f"{m['top1_agreement']:.4f} | {m['top1_agreement_up_to_ties']:.4f} | "
            f"{m['top5_overlap']:.4f} | "
            f"{m['kl_bf16_fp8_mean']:.2e} | {m['kl_bf16_fp8_max']:.2e} | "
            f"{m['max_abs_logit_error']:.4f} | "
            f"{m['mean_abs_logit_error']:.4f} |"
        )

    for batch, entry in real["by_activation_batch"].items():
        print(f"| {batch} | " + cells(entry["fp8_vs_bf16"]))
    print("| BF16 vs exact FP32 (reference) | " + cells(real["bf16_vs_fp32_baseline"]))
    chk = real["scaled_mm_check"]
    print(
        f"max |logit| {real['bf16_vs_fp32_baseline']['max_abs_logit']:.2f}; "
        "emulation vs real torch._scaled_mm on "
        f"{chk['rows']} rows: max diff {chk['max_abs_diff_emulated_vs_scaled_mm']:.4g}, "
        f"{chk['fraction_bitwise_equal']:.4%} bitwise equal"
    )
    syn = result["synthetic"]
    print(
        f"\n(b) synthetic {syn['vocab']} x {syn['hidden']}, {syn['outlier_rows']} outlier rows, "
        f"{syn['hidden_rows_per_kind']} hidden rows per kind "
        f"(activation batch {syn['activation_batch']}), "
        f"metrics over bulk rows; each cell gaussian / peaked hidden states"
    )
    print(
        "| outlier scale | row amax ratio | bulk weights subnormal/zero "
        "| top-1 | top-1 up to ties | top-5 overlap "
        "| KL mean | max abs err | mean abs err |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cells(g, pk):
        return (
            f"{g['top1_agreement']:.3f} / {pk['top1_agreement']:.3f} | "
            f"{g['top1_agreement_up_to_ties']:.3f} / {pk['top1_agreement_up_to_ties']:.3f} | "
            f"{g['top5_overlap']:.3f} / {pk['top5_overlap']:.3f} | "
            f"{g['kl_bf16_fp8_mean']:.1e} / {pk['kl_bf16_fp8_mean']:.1e} | "
            f"{g['max_abs_logit_error']:.3f} / {pk['max_abs_logit_error']:.3f} | "
            f"{g['mean_abs_logit_error']:.3f} / {pk['mean_abs_logit_error']:.3f} |"
        )

    base = syn["bf16_vs_fp32_baseline"]
    print("| BF16 vs exact FP32 (reference) | - | - | " + cells(base["gaussian"], base["peaked"]))
    for p in syn["sweep"]:
        print(
            f"| {p['outlier_scale']:g} | {p['row_amax_ratio']:.1f} | "
            f"{p['bulk_fraction_subnormal_or_zero']:.2%} | " + cells(p["gaussian"], p["peaked"])
        )


def _pick_cells(picks: dict) -> str:
    exact = picks["exact_pick"]
    covered = picks["bf16_pick_in_fp8_top_k"]
    return (
        f"{picks['plain_fp8_pick']:.4f} | "
        + " | ".join(f"{covered[str(k)]:.4f} / {exact[str(k)]:.4f}" for k in KS)
        + " |"
    )


def print_pick_tables(result: dict) -> None:
    """BF16, FP8, and FP8 + the exact pick at k = 1, 2, 4, 8, side by side."""
    head = " | ".join(f"k={k}: in top-k / exact pick" for k in KS)
    print("\nExact draft tokens: the fraction of rows whose FP8 draft token is the BF16 head's")
    print(f"| heads, hidden states | plain FP8 | {head} |")
    print("|---|---:|" + "---:|" * len(KS))
    real = result["real_pair"]
    for batch, entry in real["by_activation_batch"].items():
        for name, picks in entry["picks"].items():
            label = f"trained pair ({picks['rows']} rows), FP8 {name}, batch {batch}"
            print(f"| {label} | " + _pick_cells(picks))
    for point in result["synthetic"]["sweep"]:
        for kind in ("gaussian", "peaked"):
            picks = point[f"{kind}_picks"]["w8a8"]
            label = f"synthetic, row amax ratio {point['row_amax_ratio']:.0f}, {kind}"
            print(f"| {label} | " + _pick_cells(picks))


if __name__ == "__main__":
    raise SystemExit(main())
