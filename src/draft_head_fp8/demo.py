"""``draft-head-fp8 demo``: the whole product on tiny real Gemma 4 checkpoints.

Starts the real vLLM engine twice on the same target, assistant and prompts (flag off: BF16 draft
head; flag on: FP8 draft head), then shows side by side what was quantized and what was not, what
speculative decoding accepted, the receipt's checks one by one, and where the boot sits in the
archive. Each engine runs in its own process (vLLM loads plugins once per process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from draft_head_fp8.policy import EXPERIMENT_ENV

PROMPTS = [
    "Return a new list containing",
    "This module provides",
    "Create a new dictionary with",
    "The default value is",
    "Raise ValueError if",
    "Return True if the",
]


def default_cache() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("draft-head-fp8")) / "demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="also write every fact shown as JSON to FILE")
    parser.add_argument("--cache", metavar="DIR", help="where models, logs and vLLM caches go "
                        "(default: the user cache folder, draft-head-fp8/demo)")
    parser.add_argument("--archive", metavar="DIR", help="archive for the demo's boots (default: CACHE/archive)")
    parser.add_argument("--models", choices=("trained", "random"), default="trained",
                        help="trained: the shipped pair, trained here so drafts get accepted (default); "
                             "random: a freshly built random pair (accepts ~nothing)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per prompt (default 32)")
    parser.add_argument("--speculative-tokens", type=int, default=2, help="draft tokens per step (default 2)")
    parser.set_defaults(func=run_demo)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _models(kind: str, cache: Path) -> tuple[Path, Path]:
    if kind == "trained":
        from draft_head_fp8.train import shipped_pair

        pair = shipped_pair()
        return pair.target, pair.assistant
    from draft_head_fp8.tiny import build_tiny_pair

    folder = cache / "random-pair"
    if not (folder / "assistant" / "config.json").exists():
        _progress(f"      building a random tiny pair into {folder} (once)")
        pair = build_tiny_pair(folder, seed=0)
        return pair.target, pair.assistant
    return folder / "target", folder / "assistant"


def _engine_env(cache: Path, archive: Path, flag: bool) -> dict:
    env = dict(os.environ)
    env.pop(EXPERIMENT_ENV, None)
    if flag:
        env[EXPERIMENT_ENV] = "1"
    env["DRAFT_HEAD_FP8_ARCHIVE"] = str(archive)
    # Keep vLLM's caches inside the demo's folder; one OpenMP thread and no pinning keep small CPU
    # engines fast (both are ignored on CUDA).
    env.setdefault("VLLM_CACHE_ROOT", str(cache / "vllm"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _run_engine(step: str, target: Path, assistant: Path, env: dict, args: argparse.Namespace, logs: Path, name: str) -> dict:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}.log"
    out = logs / f"{name}.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "draft_head_fp8.engine", "--target", str(target), "--assistant", str(assistant),
               "--max-tokens", str(args.max_tokens), "--speculative-tokens", str(args.speculative_tokens),
               "--out", str(out)]
    for prompt in PROMPTS:
        command += ["--prompt", prompt]
    if env.get(EXPERIMENT_ENV):
        command.append("--draft-agreement")
    started = time.monotonic()
    _progress(f"{step} starting vLLM ({name}); log: {log}")
    with open(log, "w") as handle:
        proc = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        next_report = started + 10
        while proc.poll() is None:
            time.sleep(0.5)
            if time.monotonic() >= next_report:
                _progress(f"      ... {time.monotonic() - started:.0f} s")
                next_report += 10
    if proc.returncode != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise RuntimeError(f"the {name} engine failed (exit {proc.returncode}); last lines of {log}:\n" + "\n".join(tail))
    _progress(f"      done in {time.monotonic() - started:.0f} s")
    return json.loads(out.read_text())


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def collect(args: argparse.Namespace) -> dict:
    from draft_head_fp8.archive import Archive
    from draft_head_fp8.cli import receipt_verdict
    from draft_head_fp8.receipt import check_results

    cache = Path(args.cache) if args.cache else default_cache()
    archive_root = Path(args.archive) if args.archive else cache / "archive"
    logs = cache / "logs"
    _progress(f"[1/4] models ({args.models}); cache {cache}")
    target, assistant = _models(args.models, cache)

    before = _tree(archive_root)
    off = _run_engine("[2/4]", target, assistant, _engine_env(cache, archive_root, False), args, logs, "flag-off")
    off_wrote_nothing = _tree(archive_root) == before
    boots_before = len(Archive(archive_root).boots()) if archive_root.exists() else 0
    on = _run_engine("[3/4]", target, assistant, _engine_env(cache, archive_root, True), args, logs, "flag-on")

    _progress("[4/4] reading the receipt back from the archive")
    archive = Archive(archive_root)
    boots = archive.boots()
    if len(boots) != boots_before + 1:
        raise RuntimeError(f"expected one new boot in {archive_root}, found {len(boots) - boots_before}")
    boot = boots[-1]
    receipt_name = "receipts/post_share-rank0.json"
    receipt = json.loads(boot.read_bytes(receipt_name))
    diagnostics = json.loads(boot.read_bytes("diagnostics/post_share-rank0.json"))
    report = archive.verify()
    return {
        "models": {"kind": args.models, "target": str(target), "assistant": str(assistant)},
        "prompts": PROMPTS,
        "flag_off": off,
        "flag_on": on,
        "texts_identical": off["texts"] == on["texts"],
        "tokens_identical": off["token_ids"] == on["token_ids"],
        "target_embed_unchanged": len({
            off["after_start"]["target_embed_sha256"], on["after_start"]["target_embed_sha256"],
            on["after_generate"]["target_embed_sha256"]}) == 1,
        "flag_off_wrote_nothing": off_wrote_nothing,
        "receipt": {"boot": boot.name, "path": str(boot.path / receipt_name), "valid": receipt_verdict(receipt) is None,
                    "checks": check_results(receipt), "document": receipt},
        "diagnostics": diagnostics,
        "archive": {"root": str(archive_root), "verify_ok": report.ok,
                    "newest": [b.summary() for b in boots[-5:]]},
    }


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.2f} KiB"


def _rate(spec: dict) -> str:
    rate, length = spec.get("acceptance_rate"), spec.get("mean_acceptance_length")
    if rate is None:
        return "no drafts"
    return f"{rate:.1%} (mean length {length:.2f}; {int(spec['num_accepted_tokens'])}/{int(spec['num_draft_tokens'])})"


def render(facts: dict) -> str:
    off, on = facts["flag_off"], facts["flag_on"]
    a, b = off["after_start"], on["after_start"]
    rows: list[tuple[str, str, str]] = []

    def row(label: str, left: Any, right: Any) -> None:
        rows.append((label, str(left), str(right)))

    row("draft head method", a["draft_head_method"], b["draft_head_method"])
    row("draft head kernel", a["draft_head_kernel"] or "F.linear (unquantized)", b["draft_head_kernel"])
    row("draft head dtype", a["draft_head_dtype"], b["draft_head_dtype"])
    row("draft head shape", a["draft_head_shape"], f"{b['draft_head_shape']} (stored [hidden, vocab])")
    row("draft head bytes per read", _kib(a["draft_head_bytes"]), _kib(b["draft_head_bytes"]) + " incl. 4 B scale")
    row("target head", f"{a['target_head_method']}, {a['target_head_dtype']}",
        f"{b['target_head_method']}, {b['target_head_dtype']}")
    row("target embedding sha256", a["target_embed_sha256"][:16] + "...",
        b["target_embed_sha256"][:16] + "..." + (" (same after generation)"
                                                 if on["after_generate"]["target_embed_sha256"] == b["target_embed_sha256"]
                                                 else " (CHANGED after generation)"))
    row("draft embedding is the target's", a["draft_embed_is_target_embed"], b["draft_embed_is_target_embed"])
    row("draft acceptance", _rate(off["spec_decode"]), _rate(on["spec_decode"]))
    agreement = on.get("draft_agreement") or {}
    if agreement.get("steps"):
        row("FP8 draft token == BF16 draft token", "-",
            f"{agreement['agree']}/{agreement['steps']} ({agreement['agree'] / agreement['steps']:.1%})")
    row("generation seconds", off["seconds"]["generate"], on["seconds"]["generate"])

    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows)
    lines = ["", f"{'':<{width}}  {'flag off (BF16 draft head)':<{left}}  flag on (FP8 draft head)"]
    lines += [f"{label:<{width}}  {l:<{left}}  {r}" for label, l, r in rows]
    lines.append("")
    lines.append(f"final texts identical: {'yes' if facts['texts_identical'] else 'NO'}"
                 f"   target embedding unchanged: {'yes' if facts['target_embed_unchanged'] else 'NO'}"
                 f"   flag-off run wrote nothing: {'yes' if facts['flag_off_wrote_nothing'] else 'NO'}")
    diag = facts["diagnostics"]["head"]
    lines.append(f"FP8 bytes made from the checkpoint's embed_tokens: "
                 f"{'yes' if diag['provenance_verified'] and diag['source_sha256'] == diag['checkpoint']['sha256'] else 'NO'}"
                 f" (sha256 {diag['source_sha256'][:16]}...); scale {diag['scale']:.3e}; "
                 f"largest/median row amax {diag['row_amax_ratio']:.2f}")
    if b["draft_head_kernel"] and "Torch" in b["draft_head_kernel"] and off["seconds"]["generate"] < on["seconds"]["generate"]:
        lines.append("note: on a CPU the FP8 head is slower (torch._scaled_mm has no fast CPU path); the CPU run proves "
                     "the seam and the receipt, the speed-up is a GPU matter (docs/benchmarks.md)")
    receipt = facts["receipt"]
    lines += ["", f"receipt {receipt['path']}: {'VALID' if receipt['valid'] else 'INVALID'}"]
    for check in receipt["checks"]:
        mark = {True: "pass", False: "FAIL", None: "----"}[check["passed"]]
        lines.append(f"  {mark}  {check['check']}")
    archive = facts["archive"]
    lines += ["", f"archive {archive['root']} (verify: {'ok' if archive['verify_ok'] else 'PROBLEMS'}), newest boots:"]
    for boot in archive["newest"]:
        marker = "  <- this run" if boot.get("boot") == receipt["boot"] else ""
        lines.append(f"  {boot.get('seq'):>4}  {boot.get('status'):<10}  {boot.get('started_at')}  "
                     f"{boot.get('launch_id')}  {boot.get('files')} files{marker}")
    lines.append("")
    lines.append(f"see it again: draft-head-fp8 archive show -1 --root {archive['root']}")
    return "\n".join(lines)


def run_demo(args: argparse.Namespace) -> int:
    facts = collect(args)
    print(render(facts))
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        _progress(f"facts written to {args.json}")
    ok = facts["receipt"]["valid"] and facts["texts_identical"] and facts["target_embed_unchanged"]
    return 0 if ok else 1
