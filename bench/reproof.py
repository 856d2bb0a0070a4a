"""Benchmark: what proving the draft head again after a weight update costs on this machine, beside
what the update itself costs, at the published shapes 1024 x 262144 (Gemma 4's assistant head)
and 4096 x 128256 (Llama 3.1 8B's head, which its EAGLE drafts read).

A re-proof (``vllm_plugin/update_proof``, ``head_method.remake``) does, for one rank's head:
- ``hash``: SHA-256 of the BF16 rows as they now are (``fp8.tensor_sha256``);
- ``quantize``: amax and the per-tensor FP8 copy (``fp8.quantize_per_tensor``);
- ``pack``: vLLM's CPU packing into VNNI tiles (``convert_weight_packed``), where vLLM has it;
- ``bound``: the certificate's per-row norms (``certificate.row_error_norms``);
- ``copy``: writing the packed bytes into the FP8 weight already installed (in place).
The update itself, for the same tensor: ``read``: the head's rows read from a safetensors file
on this disk (page cache warm), and ``write``: copied into the engine's BF16 tensor (what vLLM's
loaders do, ``param.data.copy_``). Interleaved medians; ratios in one run are what counts.

Usage: python -m bench.reproof [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from bench.measure import environment, interleaved_medians, write_json
from draft_head_fp8 import certificate
from draft_head_fp8.fp8 import quantize_per_tensor, tensor_sha256

SHAPES = ((1024, 262144), (4096, 128256))  # hidden, vocab
RESULTS = Path(__file__).resolve().parent / "results"


def _packer():
    """vLLM's CPU packing where this vLLM has it (the W8A16 op's layout), else None."""
    try:
        import vllm._custom_ops  # noqa: F401  (loads vLLM's _C)

        return torch.ops._C.convert_weight_packed
    except (ImportError, AttributeError, RuntimeError):
        return None


def operations(hidden: int, vocab: int, folder: Path) -> dict:
    from safetensors import safe_open
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    rows = (torch.randn(vocab, hidden, generator=gen) * 0.02).to(torch.bfloat16)
    path = folder / f"head-{hidden}x{vocab}.safetensors"
    save_file({"lm_head.weight": rows}, path)
    engine_rows = torch.empty_like(rows)
    made = quantize_per_tensor(rows)
    pack = _packer()
    installed = pack(made.weight) if pack else made.weight.clone()

    def read():
        with safe_open(path, framework="pt") as f:
            return f.get_tensor("lm_head.weight")

    ops = {
        "update: read": read,
        "update: write": lambda: engine_rows.copy_(rows),
        "re-proof: hash": lambda: tensor_sha256(rows),
        "re-proof: quantize": lambda: quantize_per_tensor(rows),
        "re-proof: bound": lambda: certificate.row_error_norms(rows, made),
        "re-proof: copy": lambda: installed.copy_(made.weight),
    }
    if pack:
        ops["re-proof: pack"] = lambda: pack(made.weight)
    return ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reproof", description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, default=RESULTS / "reproof.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = {"environment": environment(), "shapes": []}
    with tempfile.TemporaryDirectory() as folder:
        for hidden, vocab in SHAPES:
            timings = interleaved_medians(operations(hidden, vocab, Path(folder)), args.runs)
            ms = {name: round(t["median_s"] * 1e3, 1) for name, t in timings.items()}
            update = sum(v for k, v in ms.items() if k.startswith("update"))
            proof = sum(v for k, v in ms.items() if k.startswith("re-proof"))
            result["shapes"].append({"hidden": hidden, "vocab": vocab, "ms": ms,
                                     "update_ms": update, "reproof_ms": proof})  # fmt: skip
    print(f"{'head (hidden x vocab)':<24}{'operation':<22}{'median ms':>12}")
    for shape in result["shapes"]:
        label = f"{shape['hidden']} x {shape['vocab']}"
        for name, value in shape["ms"].items():
            print(f"{label:<24}{name:<22}{value:>12.1f}")
        print(f"{label:<24}{'update, in all':<22}{shape['update_ms']:>12.1f}")
        print(f"{label:<24}{'re-proof, in all':<22}{shape['reproof_ms']:>12.1f}")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
