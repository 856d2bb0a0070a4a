"""The same target, drafter and prompts served twice by the real engine, flag off (BF16 draft
head) and flag on (FP8 draft head), and what the two runs measured and proved.

The FP8 side is read back from the archive, the receipts and diagnostics a user reads; the BF16
side is the same receipt capture of the stock head (``probe``). Used by ``draft-head-fp8
compare`` and, on the shipped pair, by ``draft-head-fp8 demo``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draft_head_fp8 import harness
from draft_head_fp8.evidence import RANKS_PATH, diagnostics_path, receipt_path

Progress = Callable[[str], None]
REFUSAL = "draft-head-fp8: refusing to start: "
# Bytes per element of the dtypes a head snapshot can name.
_DTYPE_BYTES = {"float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4}


class EngineFailed(RuntimeError):
    """An engine run did not finish; the message ends with the last lines of its log."""


class Refused(RuntimeError):
    """The flag-on engine refused to start, with the plugin's one-line reason."""


@dataclass(frozen=True)
class EngineOptions:
    """What both runs share: how vLLM is started and what it is asked."""

    prompts: list[str]
    max_tokens: int = 32
    speculative_tokens: int = 2
    tensor_parallel_size: int = 1
    max_model_len: int = 256
    dtype: str = "bfloat16"
    kv_cache_memory_bytes: int = 64 << 20  # 0: let vLLM size it
    gpu_memory_utilization: float | None = None  # vLLM's share when it sizes the KV cache
    eager: bool = True
    # Count FP8 picks against the BF16 head's in the flag-on run. It holds a second BF16 copy of
    # the head in the worker while it runs, so memory figures are measured without it.
    draft_agreement: bool = True
    # Settings of the flag-on run only (e.g. the demo's DRAFT_HEAD_FP8_BF16_FROM=never).
    flag_on_env: tuple[tuple[str, str], ...] = ()

    def probe_args(self) -> tuple[str, ...]:
        args = [
            "--max-tokens", str(self.max_tokens),
            "--speculative-tokens", str(self.speculative_tokens),
            "--tensor-parallel-size", str(self.tensor_parallel_size),
            "--max-model-len", str(self.max_model_len),
            "--dtype", self.dtype,
            "--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes),
        ]  # fmt: skip
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if not self.eager:
            args.append("--no-eager")
        for prompt in self.prompts:
            args += ["--prompt", prompt]
        return tuple(args)


def snapshot_bytes(snapshot: dict | None) -> int | None:
    """Bytes a tensor snapshot describes (numel x element size), None if it cannot tell."""
    if not isinstance(snapshot, dict):
        return None
    size = _DTYPE_BYTES.get(str(snapshot.get("dtype")).removeprefix("torch."))
    numel = snapshot.get("numel")
    return None if size is None or not isinstance(numel, int) else size * numel


def served_head_bytes(receipt: dict) -> int | None:
    """What one read of the draft head costs on this rank: its weight plus its scale, if any."""
    weight = snapshot_bytes(receipt.get("head_weight"))
    scale = snapshot_bytes(receipt.get("head_weight_scale"))
    return None if weight is None else weight + (scale or 0)


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def run_engine(
    step: str,
    name: str,
    *,
    flag: bool,
    target: Path,
    assistant: Path,
    cache: Path,
    archive: Path,
    args: tuple[str, ...],
    progress: Progress,
    env: tuple[tuple[str, str], ...] = (),
    timeout: float = 900,
) -> harness.Launch:
    """One engine run as ``compare`` (and the benchmarks that compare heads) makes it: the probe
    with ``args`` in ``harness.engine_env`` plus ``env``, its log kept in ``cache``/logs. Raises
    ``Refused`` when the flag-on engine refuses the head, ``EngineFailed`` when it fails
    otherwise (after ``timeout`` seconds, too)."""
    logs = cache / "logs"
    log = logs / f"{name}.log"
    progress(f"{step} starting vLLM ({name}); log: {log}")
    run = harness.launch(
        target,
        assistant,
        env={**harness.engine_env(cache, flag=flag, archive=archive), **dict(env)},
        out=logs / f"{name}.json",
        args=args,
        log=log,
        progress=lambda seconds: progress(f"      ... {seconds:.0f} s"),
        timeout=timeout,
    )
    if not run.ok:
        reasons = [line for line in run.stderr.splitlines() if line.startswith(REFUSAL)]
        if flag and reasons:
            raise Refused(reasons[0].removeprefix(REFUSAL))
        raise EngineFailed(
            f"the {name} engine failed (exit {run.returncode}); last lines of {log}:\n{run.tail()}"
            + _hint(run.stdout + run.stderr)
        )
    progress(f"      done in {run.seconds:.0f} s")
    return run


def _hint(log: str) -> str:
    """What to pass for the engine failures users meet most."""
    if "--gpu-memory-utilization" in log:
        # vLLM sized the KV cache from a share of all memory and found less free: on a CPU that
        # is any other process on the machine.
        return (
            "\nhint: vLLM found too little free memory for its default share; pass "
            "--kv-cache-memory-bytes BYTES (a fixed KV cache, e.g. 1073741824) or a lower "
            "--gpu-memory-utilization"
        )
    return ""


def figures(run: dict) -> dict:
    """What one run measured, in the units people quote."""
    spec, timing = run["spec_decode"], run.get("draft_head_timing") or {}
    generate = run["seconds"]["generate"]
    devices = [b for b in run.get("peak_device_bytes") or [] if b is not None]
    return {
        "acceptance_rate": spec.get("acceptance_rate"),
        "mean_acceptance_length": spec.get("mean_acceptance_length"),
        "draft_tokens": spec.get("num_draft_tokens"),
        "accepted_tokens": spec.get("num_accepted_tokens"),
        "draft_head_ms_per_call": None if not timing else 1e3 * timing["median_s"],
        "draft_head_calls": timing.get("calls"),
        # by rows per call (the batch): {rows: {"calls", "median_s"}}
        "draft_head_by_rows": timing.get("by_rows"),
        "generated_tokens": run["generated_tokens"],
        "generate_seconds": generate,
        "tokens_per_second": run["generated_tokens"] / generate if generate else None,
        "peak_rss_bytes": run.get("peak_rss_bytes"),
        "peak_device_bytes": max(devices) if devices else None,
    }


def _read_boot(archive_root: Path, boots_before: int, tp_size: int) -> dict:
    from draft_head_fp8.archive import Archive
    from draft_head_fp8.evidence.checks import check_results
    from draft_head_fp8.evidence.verdict import receipt_verdict

    archive = Archive(archive_root)
    boots = archive.boots()
    if len(boots) != boots_before + 1:
        found = len(boots) - boots_before
        raise EngineFailed(f"expected one new boot in {archive_root}, found {found}")
    boot = boots[-1]
    receipts = [json.loads(boot.read_bytes(receipt_path(r))) for r in range(tp_size)]
    records = [json.loads(boot.read_bytes(diagnostics_path(r))) for r in range(tp_size)]
    ranks = json.loads(boot.read_bytes(RANKS_PATH)) if tp_size > 1 else None
    verdicts = [receipt_verdict(receipt) for receipt in receipts]
    report = archive.verify()
    return {
        "receipt": {
            "boot": boot.name,
            "path": str(boot.path / receipt_path(0)),
            "schema": receipts[0]["schema"],
            "valid": all(v is None for v in verdicts) and (ranks is None or ranks["passed"]),
            "reasons": [v for v in verdicts if v is not None]
            + (ranks["problems"] if ranks else []),
            "checks": check_results(receipts[0]),
            "document": receipts[0],
            "ranks": ranks,
        },
        "diagnostics": records[0],
        "diagnostics_ranks": records,
        "archive": {
            "root": str(archive_root),
            "verify_ok": report.ok,
            "newest": [b.summary() for b in boots[-5:]],
        },
    }


def compare(
    target: Path,
    assistant: Path,
    options: EngineOptions,
    *,
    cache: Path,
    archive_root: Path,
    progress: Progress,
) -> dict:
    """Both runs and their evidence. Raises ``Refused`` when the flag-on engine refuses the
    head, ``EngineFailed`` when an engine fails otherwise."""
    from draft_head_fp8.archive import Archive

    args = options.probe_args()
    common = dict(target=target, assistant=assistant, cache=cache, archive=archive_root)
    before = _tree(archive_root)
    off = run_engine("[2/4]", "flag-off", flag=False, args=args, progress=progress, **common).facts
    off_wrote_nothing = _tree(archive_root) == before
    boots_before = len(Archive(archive_root).boots()) if archive_root.exists() else 0
    watch = ("--draft-agreement",) if options.draft_agreement else ()
    on = run_engine(
        "[3/4]", "flag-on", flag=True, args=args + watch, progress=progress,
        env=options.flag_on_env, **common,
    ).facts  # fmt: skip
    progress("[4/4] reading the receipts back from the archive")
    evidence = _read_boot(archive_root, boots_before, options.tensor_parallel_size)

    def unchanged(key: str) -> bool:
        runs = (off["after_start"], on["after_start"], on["after_generate"])
        return len({facts[key] for facts in runs}) == 1

    agreement = on.get("draft_agreement") or {}
    return {
        "models": {"target": str(target), "assistant": str(assistant)},
        "options": dict(options.__dict__),
        "flag_off": off,
        "flag_on": on,
        "figures": {"flag_off": figures(off), "flag_on": figures(on)},
        "draft_tokens_identical": agreement.get("agree") / agreement["steps"]
        if agreement.get("steps")
        else None,
        "texts_identical": off["texts"] == on["texts"],
        "tokens_identical": off["token_ids"] == on["token_ids"],
        "spec_decode_identical": off["spec_decode"] == on["spec_decode"],
        "target_embed_unchanged": unchanged("target_embed_sha256"),
        "target_head_unchanged": unchanged("target_head_sha256"),
        "flag_off_wrote_nothing": off_wrote_nothing,
        # The certified pick's draft rows by stage over this run (rank 0; None: not certified).
        "certificate": (on["after_generate"].get("certificate") or {}).get("counts"),
        **evidence,
    }


def ok(facts: dict[str, Any]) -> bool:
    """What the demo and ``compare`` exit 0 on: proven, lossless, the target untouched."""
    return bool(
        facts["receipt"]["valid"]
        and facts["texts_identical"]
        and facts["target_embed_unchanged"]
        and facts["target_head_unchanged"]
    )
