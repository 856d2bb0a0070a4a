"""The fused Triton kernel (draft_head_fp8.fused_head: FP8 scan + block summaries + certified pick)
against BF16 ``F.linear`` and today's vLLM-kernel path (``torch._scaled_mm`` with activations
quantized per call, then ``certificate.certified_pick`` with no host sync), at batch 1-8 on the
head shapes users serve: seconds per call from CUDA graphs (and eagerly), the copy bandwidth of
the same run as the floor, the share of draft rows each stage certified on peaked and on gaussian
hidden states, and every pick against the BF16 argmax. One JSON file, one table.

On a GPU (bench/gpu_checks.sh): ``python -m bench.fused_head``. On a CPU only as a smoke run of
the script itself in Triton's interpreter (``--smoke``: tiny shapes, no timing claims).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.head_matmul import (
    _scaled_mm_head,
    copy_bandwidth,
    random_bf16,
    time_cpu,
    time_cuda,
    time_cuda_graphs,
)
from bench.measure import environment, write_json
from draft_head_fp8.certificate import (
    KERNEL_FUSED_W8A16,
    KERNEL_SCALED_MM,
    certified_pick,
    count_record,
    logit_bound,
    row_error_norms,
)
from draft_head_fp8.fp8 import quantize_per_tensor

RESULTS = Path(__file__).parent / "results"
SHAPES = ("1024x262144", "4096x128256", "5376x262144")


def hidden_states(rows: torch.Tensor, batch: int, peaked: bool, seed: int) -> torch.Tensor:
    """Gaussian draft hidden states, or peaked ones: each pulled toward one head row by as much
    as its own norm (a draft that is sure of its token, as a trained drafter mostly is)."""
    gen = torch.Generator(device=rows.device).manual_seed(seed)
    g = torch.randn(batch, rows.shape[1], generator=gen, device=rows.device)
    if peaked:
        target = torch.randint(0, rows.shape[0], (batch,), generator=gen, device=rows.device)
        toward = rows[target].float()
        g += toward / toward.norm(dim=-1, keepdim=True) * g.norm(dim=-1, keepdim=True)
    return g.bfloat16()


def bench_shape(hidden: int, vocab: int, args, device: torch.device, bandwidth: float) -> list:
    from draft_head_fp8.fused_head import FusedHead

    cuda = device.type == "cuda"
    rows_bf16 = random_bf16(vocab, hidden, device, args.seed)
    q = quantize_per_tensor(rows_bf16)
    fused = FusedHead.build(
        q.weight, q.scale, rows_bf16, valid_rows=vocab,
        bound=logit_bound(row_error_norms(rows_bf16, q, kernel=KERNEL_FUSED_W8A16),
                          hidden=hidden, kernel=KERNEL_FUSED_W8A16),
    )  # fmt: skip
    today = logit_bound(row_error_norms(rows_bf16, q, kernel=KERNEL_SCALED_MM),
                        hidden=hidden, kernel=KERNEL_SCALED_MM)  # fmt: skip
    out = []
    for batch in args.batches:
        for peaked in (True, False):
            x = hidden_states(rows_bf16, batch, peaked, args.seed + batch)
            heads = {
                "bf16": lambda x=x: F.linear(x, rows_bf16),
                "scaled_mm+certified": lambda x=x: (
                    certified_pick(
                        _scaled_mm_head(x, q),
                        x,
                        rows_bf16,
                        k=8,
                        wide_k=64,
                        valid_rows=vocab,
                        bound=today,
                        host_sync=False,
                    ).logits
                ),  # fmt: skip
                "fused": lambda x=x: fused.pick(x, host_sync=False).logits,
            }
            row = {"hidden": hidden, "vocab": vocab, "batch": batch, "peaked": peaked}
            reference = F.linear(x, rows_bf16).float().argmax(-1)
            row["picks_equal_bf16"] = {
                name: bool(torch.equal(head().float().argmax(-1), reference))
                for name, head in heads.items()
                if name != "bf16"
            }
            row["fused_stages"] = count_record(fused.pick(x, host_sync=False).counts)
            seconds = {}
            for name, head in heads.items():
                if cuda:
                    seconds[name] = time_cuda([head], args.reps, args.warmup)
                    try:
                        seconds[name + " (graph)"] = time_cuda_graphs([head], args.reps, 3)
                    except Exception as exc:  # keep the eager figure when capture fails
                        row[f"graph_error_{name}"] = repr(exc)
                else:
                    seconds[name] = time_cpu(head, 2)
            row["seconds"] = seconds
            base = seconds.get("bf16 (graph)", seconds["bf16"])
            row["time_over_bf16"] = {name: s / base for name, s in seconds.items()}
            fp8_bytes = vocab * hidden + batch * (hidden + vocab) * 2
            fused_s = seconds.get("fused (graph)", seconds["fused"])
            row["fused_share_of_copy_bandwidth"] = fp8_bytes / fused_s / bandwidth
            out.append(row)
            print(_line(row), flush=True)
    return out


def _line(row: dict) -> str:
    ratios = ", ".join(f"{name} {r:.2f}x" for name, r in row["time_over_bf16"].items())
    kind = "peaked" if row["peaked"] else "gaussian"
    return (
        f"{row['hidden']} x {row['vocab']} batch {row['batch']} {kind}: {ratios}; stages "
        f"{row['fused_stages']}; picks equal BF16 {row['picks_equal_bf16']}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), help="HIDDENxVOCAB")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="CPU, Triton's interpreter, tiny shapes")
    args = p.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is first imported
        args.shapes, args.batches = ["64x2048"], [1, 2]
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    bandwidth = copy_bandwidth(device, 1 << 30 if device.type == "cuda" else 1 << 26, 20)
    rows = []
    for shape in args.shapes:
        hidden, vocab = (int(v) for v in shape.split("x"))
        rows += bench_shape(hidden, vocab, args, device, bandwidth)
    name = "fused_head_smoke.json" if args.smoke else f"fused_head_{device.type}.json"
    write_json(
        RESULTS / name,
        {"environment": environment(), "copy_bandwidth_bytes_per_s": bandwidth, "rows": rows},
    )
    return 0 if all(all(r["picks_equal_bf16"].values()) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
