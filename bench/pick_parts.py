"""Where the exact pick's time goes, op by op, on whatever device is here (CUDA: eager and
replayed from a CUDA graph), and what a two-stage top-k (each block of the vocabulary its own
top-k, then the top-k of those) would change.

    python -m bench.pick_parts [--vocab 262144 128256] [--hidden 1024] [--batches 1 8] [--k 8 64]

On a GPU a single-row ``topk`` over a quarter-million logits runs on few blocks; the two-stage
form spreads the first stage over the whole device and returns the same values (the global
top-k lies in the union of the blocks' top-k). Both are timed on the same logits, with the
other pieces of ``rescore_top_k`` (the masked minimum, the scatter, the gather and the k dot
products) and of ``certified_pick`` (the bound's addmm over the vocabulary, the wide top-k).
Writes bench/results/pick_parts_<device>.json and prints the table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from bench.head_matmul import random_bf16, time_cpu, time_cuda, time_cuda_graphs
from bench.measure import write_json

ROOT = Path(__file__).resolve().parent.parent


def block_size(vocab: int, k: int) -> int:
    """The largest power of two up to 2048 that divides ``vocab`` and leaves blocks of at least
    4k; 0 where none does."""
    for size in (2048, 1024, 512, 256, 128):
        if vocab % size == 0 and size >= 4 * k and vocab // size >= 2:
            return size
    return 0


def two_stage_topk(flat: torch.Tensor, k: int, block: int) -> torch.Tensor:
    tokens, vocab = flat.shape
    first = flat.view(tokens, vocab // block, block).topk(k, dim=-1)
    base = torch.arange(0, vocab, block, device=flat.device).view(1, -1, 1)
    ids = (first.indices + base).reshape(tokens, -1)
    second = first.values.reshape(tokens, -1).topk(k, dim=-1)
    return ids.gather(-1, second.indices)


def parts(vocab: int, hidden: int, batch: int, ks: list[int], device: torch.device, seed: int):
    w = random_bf16(vocab, hidden, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + batch)
    x = torch.randn(batch, hidden, generator=gen, device=device).bfloat16()
    logits = torch.nn.functional.linear(x, w)
    scratch = logits.clone()
    terms = torch.rand(batch, 2, device=device)
    bound_rows = torch.rand(2, vocab, device=device)
    ops = {}
    checks = {}
    for k in ks:
        block = block_size(vocab, k)
        ops[f"topk({k})"] = lambda k=k: logits.topk(k, dim=-1)
        if block:
            ops[f"two-stage topk({k}), blocks of {block}"] = lambda k=k, b=block: two_stage_topk(
                logits, k, b
            )
            plain = logits.float().topk(k, dim=-1).values
            two = logits.float().gather(-1, two_stage_topk(logits, k, block))
            checks[f"k={k}"] = bool(torch.equal(plain, two))
    candidates = logits.topk(8, dim=-1).indices
    exact = torch.randn(batch, 8, device=device).bfloat16()
    ops["gather 8 rows + dot"] = lambda: torch.bmm(w[candidates].float(), x.float().unsqueeze(-1))
    ops["clamp below (minimum)"] = lambda: torch.minimum(scratch, exact[:, :1], out=scratch)
    ops["scatter 8"] = lambda: scratch.scatter_(-1, candidates, exact)
    ops["copy of the logits"] = lambda: scratch.copy_(logits)
    ops["certificate: upper = addmm over the vocabulary"] = lambda: logits.float().addmm_(
        terms, bound_rows
    )
    ops["argmax (the floor of any pick)"] = lambda: logits.argmax(-1)
    times = {}
    for name, fn in ops.items():
        if device.type == "cuda":
            times[name] = time_cuda([fn], 200, 20)
            times[name + " (graph)"] = time_cuda_graphs([fn], 200, 20)
        else:
            times[name] = time_cpu(fn, 7)
    return {
        "vocab": vocab,
        "hidden": hidden,
        "batch": batch,
        "seconds": times,
        "same_values": checks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[262144, 128256])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--k", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    started = time.perf_counter()
    rows = [
        parts(v, args.hidden, b, args.k, device, args.seed)
        for v in args.vocab
        for b in args.batches
    ]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = {
        "schema": "draft-head-fp8-bench-pick-parts/v1",
        "device": name,
        "torch": torch.__version__,
        "rows": rows,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    out = ROOT / "bench" / "results" / f"pick_parts_{device.type}.json"
    write_json(out, result)
    names = list(dict.fromkeys(n for r in rows for n in r["seconds"]))
    print(f"{name}, torch {torch.__version__}; hidden {args.hidden}")
    print("| op | " + " | ".join(f"{r['vocab']} x{r['batch']}" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for n in names:
        cells = [f"{r['seconds'][n] * 1e6:.1f} us" if n in r["seconds"] else "-" for r in rows]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print("same values, two-stage vs plain:", [r["same_values"] for r in rows])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
