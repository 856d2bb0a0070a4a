"""Exact draft tokens per drafter family: how often the BF16 head's pick is inside the FP8 top-k,
on each family's tiny head and on heavy-tailed synthetic heads of each published head shape.

    python -m bench.fidelity_families [--families NAME ...] [--shapes NAME|VOCABxHIDDEN ...]
        [--ratios 1 100 10000] [--rows 256] [--threads 1]

The heads and metrics are ``bench/fidelity.py``'s: the BF16 reference is ``F.linear`` in bf16;
the FP8 head is ``quantize_per_tensor`` plus vLLM's W8A8 kernel (activations quantized per head
call of ``--batch`` rows, ``torch._scaled_mm`` emulated in float32; ``emulated_w8a8`` converts
each weight chunk once for all rows, checked against ``heads.fp8_emulated`` in the run) and, on
the tiny heads, also vLLM's CPU W8A16 op. ``fidelity.Picks`` counts plain FP8 agreement, the BF16
pick inside the FP8 top-k for k in ``fidelity.KS``, and the exact pick (``rescore_top_k``).

(1) Tiny heads: each family's tiny checkpoint (``draft_head_fp8.tiny.build``, random weights, a
temporary folder), the tensor its draft reads (the family's ``HeadSource``: for target-head
families the target's ``lm_head.weight``, or its embedding if tied), read with safetensors. Hidden
states: held-out stdlib docstrings (``tools.corpus``) through the target in transformers, the
state its final norm returns, a stand-in for an MTP layer's final-normed state; for EAGLE-1,
whose vLLM drafter hands its head the un-normed residual stream, the norm's input instead. The
Gemma 4 assistant reads its own head: its draft hidden states come from ``tools.draft_replay``.

(2) Synthetic heads of the published shapes (``SHAPES``): ``fidelity.run_synthetic``'s method
(bulk rows N(0, s) with bulk logits about N(0, ``--logit-std``), ``--outliers`` rows scaled by r,
metrics over the bulk rows, gaussian and peaked hidden states), W8A8 only (the harder kernel).

Results merge into ``bench/results/fidelity_families.json`` by family and by shape, so shapes can
be measured in separate runs; the tables print from the merged file.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import torch

from bench import heads
from bench.fidelity import KS, Picks, Totals, fp8_exponent_stats, synthetic_hidden_states
from draft_head_fp8.fp8 import quantize_per_tensor
from draft_head_fp8.settings import DEFAULT_RESCORE_TOPK

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "fidelity_families.json"

# Published head shapes (vocab x hidden) and the drafter family that serves each model.
SHAPES = {
    "gemma4-assistant": (262144, 1024, "gemma4-mtp"),
    "qwen3.5-35b-a3b": (248320, 2048, None),  # Qwen3.5 MTP: not served yet
    "qwen3-next-80b-a3b": (151936, 2048, "qwen3-next-mtp"),
    "deepseek-v3": (129280, 7168, "deepseek-v3-mtp"),
    "glm-4.5-air": (151552, 4096, "glm45-mtp"),
    "mimo-7b": (151680, 4096, "mimo-mtp"),
    "llama-3.1-8b": (128256, 4096, "llama-eagle1"),
}
# Families whose vLLM drafter hands the head the un-normed residual stream (llama_eagle.py:
# ``hidden_states + residual``); every MTP drafter norms it first.
UN_NORMED = {"llama-eagle1"}
SLICE_ROWS = 64  # hidden-state rows per metric update: bounds the float32 copies of the logits


# ------------------------------------------------------------------------------------------
# Shared pieces
# ------------------------------------------------------------------------------------------


def emulated_w8a8(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, batch: int, chunk: int = 0
) -> torch.Tensor:
    """``heads.fp8_emulated`` on each ``batch`` rows of ``x`` (one activation scale per head
    call), each FP8 weight chunk converted to float32 once for all rows: the conversion, not the
    product, dominates a big head called many times."""
    q, scales = [], []
    for start in range(0, x.shape[0], batch):
        qb, sb = heads.quantize_activation(x[start : start + batch])
        q.append(qb.to(torch.float32))
        scales.append((sb * w_scale).to(torch.float32).expand(qb.shape[0]))
    qf, scale = torch.cat(q), torch.cat(scales)[:, None]
    vocab, hidden = w_fp8.shape
    chunk = chunk or max(1, (1 << 24) // hidden)  # 64 MiB of float32 weight at a time
    out = torch.empty(x.shape[0], vocab, dtype=torch.bfloat16)
    for start in range(0, vocab, chunk):
        w = w_fp8[start : start + chunk].to(torch.float32)
        out[:, start : start + chunk] = ((qf @ w.t()) * scale).to(torch.bfloat16)
    return out


def measure(ref, fp8, x, w, keep=None) -> dict:
    """``fidelity.Totals`` and ``fidelity.Picks`` over all rows, ``SLICE_ROWS`` at a time."""
    totals, picks = Totals(), Picks()
    for start in range(0, x.shape[0], SLICE_ROWS):
        rows = slice(start, start + SLICE_ROWS)
        totals.add(ref[rows], fp8[rows], keep)
        picks.add(ref[rows], fp8[rows], x[rows], w, keep)
    return {"fp8_vs_bf16": totals.result(), "picks": picks.result()}


def emulation_check(x, quant, batch: int, vocab: int = 4096) -> dict:
    """``emulated_w8a8`` against ``heads.fp8_emulated`` (one call per batch) on a vocab slice."""
    rows = min(x.shape[0], 4 * batch)
    w = quant.weight[:vocab]
    ours = emulated_w8a8(x[:rows], w, quant.scale, batch).float()
    theirs = torch.cat(
        [heads.fp8_emulated(x[s : s + batch], w, quant.scale) for s in range(0, rows, batch)]
    ).float()
    return {
        "rows": rows,
        "vocab": int(w.shape[0]),
        "max_abs_diff": float((ours - theirs).abs().max()),
        "fraction_bitwise_equal": float((ours == theirs).float().mean()),
    }


def head_stats(quant) -> dict:
    return {
        "row_amax_max": quant.row_amax_max,
        "row_amax_median": quant.row_amax_median,
        "row_amax_ratio": quant.row_amax_ratio,
        "weight_scale": float(quant.scale[0]),
    }


# ------------------------------------------------------------------------------------------
# (1) each family's tiny head
# ------------------------------------------------------------------------------------------


def family_head(family, pair) -> tuple[torch.Tensor, dict]:
    """The BF16 tensor ``family``'s draft reads as its head, from ``pair``'s safetensors."""
    from safetensors import safe_open

    from draft_head_fp8.families.family import TARGET

    folder = pair.target if family.head.folder == TARGET else pair.assistant
    config = json.loads((folder / "config.json").read_text())
    tied = bool(config.get("tie_word_embeddings", False))
    name = family.head.tensor_for(tied)
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            if name in f.keys():
                head = f.get_tensor(name).to(torch.bfloat16)
                info = {"folder": family.head.folder, "tensor": name, "tied": tied}
                return head, {**info, "shape": [int(d) for d in head.shape]}
    raise KeyError(f"{name} is in no safetensors file of {folder}")


def target_hidden_states(target_dir: Path, prompts: int, tokens: int, un_normed: bool):
    """bf16 hidden states of held-out text through the target: its final norm's output (or
    input, ``un_normed``) at every position of ``prompts`` documents of ``tokens`` tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from tools import corpus

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # not the list of MTP tensors the target does not load
    try:
        model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16)
    finally:
        hf_logging.set_verbosity(verbosity)
    model = model.float().eval()
    docs = corpus.heldout_prompts(
        tokenizer, corpus.stdlib_docstring_corpus(), count=prompts, prompt_tokens=tokens
    )
    seen: list[torch.Tensor] = []

    def keep(module, args, output):
        seen.append((args[0] if un_normed else output)[0])

    hook = model.model.norm.register_forward_hook(keep)
    try:
        with torch.no_grad():
            for doc in docs:
                model.model(input_ids=torch.tensor([doc]), use_cache=False)
    finally:
        hook.remove()
    x = torch.cat(seen).to(torch.bfloat16)  # vLLM feeds the head bf16
    kind = "un-normed (the final norm's input)" if un_normed else "final-normed"
    return x, {
        "hidden_states": f"target's {kind} last hidden state on held-out text",
        "documents": len(docs),
        "rms": float(x.float().pow(2).mean().sqrt()),
    }


def family_hidden_states(family, pair_dir: Path, pair, args):
    if family.shares_target_head:
        un_normed = family.name in UN_NORMED
        return target_hidden_states(pair.target, args.prompts, args.tokens, un_normed)
    from bench.fidelity import real_pair_hidden_states

    x, _, info = real_pair_hidden_states(args.prompts, args.tokens, pair_dir)
    info = {k: v for k, v in info.items() if k in ("prompts", "new_tokens", "draft_steps")}
    hidden = "the assistant's final-normed draft hidden states (tools.draft_replay)"
    return x, {"hidden_states": hidden, **info, "rms": float(x.float().pow(2).mean().sqrt())}


def run_tiny(name: str, args) -> dict:
    from draft_head_fp8 import tiny
    from draft_head_fp8.families import by_name

    started = time.perf_counter()
    family = by_name(name)
    with tempfile.TemporaryDirectory() as tmp:
        pair_dir = Path(tmp) / "pair"
        pair = tiny.build(name, pair_dir, seed=args.seed)
        w, info = family_head(family, pair)
        x, states = family_hidden_states(family, pair_dir, pair, args)
    quant = quantize_per_tensor(w)
    ref = heads.bf16(x, w)
    kernels = {
        "w8a8": emulated_w8a8(x, quant.weight, quant.scale, args.batch),
        "w8a16": heads.fp8_w8a16(x, quant.weight, quant.scale),
    }
    return {
        "family": name,
        "shares_target_head": family.shares_target_head,
        "head": {**info, **head_stats(quant), **fp8_exponent_stats(quant.weight)},
        **states,
        "hidden_rows": int(x.shape[0]),
        "activation_batch": args.batch,
        "max_abs_logit": float(ref.float().abs().max()),
        "kernels": {k: measure(ref, fp8, x, w) for k, fp8 in kernels.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------------------------------
# (2) synthetic heavy-tailed heads of each published shape
# ------------------------------------------------------------------------------------------


def synthetic_head(vocab: int, hidden: int, outliers: int, logit_std: float, gen):
    """bf16 ``[vocab, hidden]`` rows N(0, logit_std / sqrt(hidden)), filled a chunk at a time;
    ``outliers`` random rows to rescale, and the bulk mask (every other row)."""
    sigma = logit_std / math.sqrt(hidden)
    w = torch.empty(vocab, hidden, dtype=torch.bfloat16)
    step = max(1, (1 << 22) // hidden)  # 16 MiB of float32 at a time
    for start in range(0, vocab, step):
        rows = min(step, vocab - start)
        w[start : start + rows] = (torch.randn(rows, hidden, generator=gen) * sigma).to(
            torch.bfloat16
        )
    picked = torch.randperm(vocab, generator=gen)[:outliers]
    keep = torch.ones(vocab, dtype=torch.bool)
    keep[picked] = False
    return w, picked, keep, sigma


def run_shape(name: str, vocab: int, hidden: int, args) -> dict:
    if args.rows % args.batch:
        raise ValueError(f"--rows {args.rows} is not a multiple of --batch {args.batch}")
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    w, outliers, keep, sigma = synthetic_head(vocab, hidden, args.outliers, args.logit_std, gen)
    base_rows = w[outliers].clone()
    xs, _, boost = synthetic_hidden_states(w, keep, args.rows, args.logit_std, gen)
    # The bulk's BF16 logits never change across the sweep (only outlier rows are rescaled).
    refs = {kind: heads.bf16(x, w) for kind, x in xs.items()}
    sweep, check = [], None
    for r in args.ratios:
        t0 = time.perf_counter()
        w[outliers] = (base_rows.to(torch.float32) * r).to(torch.bfloat16)
        quant = quantize_per_tensor(w)
        point = {"outlier_scale": r, **head_stats(quant)}
        point.update({f"bulk_{k}": v for k, v in fp8_exponent_stats(quant.weight, keep).items()})
        # Both kinds in one pass over the weight (no head call mixes them: rows % batch == 0).
        fp8 = emulated_w8a8(torch.cat(list(xs.values())), quant.weight, quant.scale, args.batch)
        for (kind, x), logits in zip(xs.items(), fp8.split(args.rows)):
            point[kind] = measure(refs[kind], logits, x, w, keep)
        del fp8
        check = check or emulation_check(xs["gaussian"], quant, args.batch)
        point["seconds"] = round(time.perf_counter() - t0, 1)
        sweep.append(point)
        print(
            f"  {name} r={r:g}: ratio {point['row_amax_ratio']:.1f}, {point['seconds']} s",
            flush=True,
        )
        del quant
    return {
        "shape": [vocab, hidden],
        "family": SHAPES.get(name, (0, 0, None))[2],
        "bulk_row_std": sigma,
        "bulk_logit_std": args.logit_std,
        "outlier_rows": args.outliers,
        "hidden_rows_per_kind": args.rows,
        "peaked_logit_boost": boost,
        "activation_batch": args.batch,
        "metrics_over": "bulk rows only (all but the outlier rows)",
        "emulation_check": check,
        "sweep": sweep,
        "seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def pick_cells(picks: dict, k: int = DEFAULT_RESCORE_TOPK) -> str:
    covered = picks["bf16_pick_in_fp8_top_k"]
    return (
        f"{picks['plain_fp8_pick']:.4f} | "
        + " | ".join(f"{covered[str(j)]:.4f}" for j in KS)
        + f" | {picks['exact_pick'][str(k)]:.4f} | "
        + f"{picks['exact_pick_missed_in_top_k_rows'][str(k)]} |"
    )


def table_head(first: str) -> str:
    k = DEFAULT_RESCORE_TOPK
    covered = " | ".join(f"in top-{j}" for j in KS)
    return (
        f"| {first} | plain FP8 | {covered} | exact pick (k={k}) | missed though in top-{k} |\n"
        + "|---|---:|"
        + "---:|" * (len(KS) + 2)
    )


def print_tables(result: dict) -> None:
    print("\n(1) tiny heads (random weights): fraction of rows whose FP8 pick is the BF16 head's")
    print(table_head("family, head, hidden states, FP8 kernel"))
    for name, entry in sorted(result.get("tiny_heads", {}).items()):
        head = entry["head"]
        for kernel, m in entry["kernels"].items():
            label = (
                f"{name}, {head['shape'][0]} x {head['shape'][1]} "
                f"(ratio {head['row_amax_ratio']:.2f}), {entry['hidden_rows']} rows, {kernel}"
            )
            print(f"| {label} | " + pick_cells(m["picks"]))
    print("\n(2) synthetic heavy-tailed heads, W8A8, metrics over the bulk rows")
    print(table_head("shape (vocab x hidden), row amax ratio, hidden states"))
    shapes = result.get("synthetic_shapes", {})
    order = [*SHAPES, *sorted(set(shapes) - set(SHAPES))]
    for name, entry in ((n, shapes[n]) for n in order if n in shapes):
        vocab, hidden = entry["shape"]
        for point in entry["sweep"]:
            for kind in ("gaussian", "peaked"):
                label = f"{name} {vocab} x {hidden}, {point['row_amax_ratio']:.0f}, {kind}"
                print(f"| {label} | " + pick_cells(point[kind]["picks"]))


def merge(path: Path, part: str, entries: dict) -> dict:
    """``entries`` into the file's ``part`` (by family or shape); the rest is kept as it was."""
    result = json.loads(path.read_text()) if path.exists() else {}
    result.setdefault("schema", "draft-head-fp8-bench-fidelity-families/v1")
    result.setdefault(part, {}).update(entries)
    result["torch"] = torch.__version__
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def parse_shape(text: str) -> tuple[str, int, int]:
    if text in SHAPES:
        return text, SHAPES[text][0], SHAPES[text][1]
    vocab, sep, hidden = text.lower().partition("x")
    if not (sep and vocab.isdigit() and hidden.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(SHAPES)} or VOCABxHIDDEN")
    return text, int(vocab), int(hidden)


def parser() -> argparse.ArgumentParser:
    from draft_head_fp8.families import all_families

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    families = [f.name for f in all_families()]
    p.add_argument(
        "--families",
        nargs="*",
        default=families,
        choices=families,
        help="tiny heads to measure (none: skip; default: every family)",
    )
    p.add_argument(
        "--shapes",
        nargs="*",
        type=parse_shape,
        default=list(map(parse_shape, SHAPES)),
        help="synthetic head shapes, by name or VOCABxHIDDEN (none: skip)",
    )
    p.add_argument("--ratios", type=float, nargs="+", default=[1, 100, 10000])
    p.add_argument("--outliers", type=int, default=32, help="heavy rows in a synthetic head")
    p.add_argument("--rows", type=int, default=256, help="synthetic hidden-state rows per kind")
    p.add_argument("--batch", type=int, default=16, help="rows per head call (activation scale)")
    p.add_argument("--logit-std", type=float, default=4.0)
    p.add_argument("--prompts", type=int, default=16, help="held-out documents per tiny head")
    p.add_argument("--tokens", type=int, default=64, help="tokens per held-out document")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per tiny checkpoint loaded is noise here
    started = time.perf_counter()
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in args.families:
        print(f"(1) tiny head of {name} ...", flush=True)
        entry = run_tiny(name, args)
        result = merge(args.out, "tiny_heads", {name: {**entry, "threads": args.threads}})
    for name, vocab, hidden in args.shapes:
        print(f"(2) synthetic {name} {vocab} x {hidden} ...", flush=True)
        entry = run_shape(name, vocab, hidden, args)
        result = merge(args.out, "synthetic_shapes", {name: {**entry, "threads": args.threads}})
    print_tables(result)
    print(f"total {time.perf_counter() - started:.1f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
