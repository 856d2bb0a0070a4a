"""The same target, assistant and prompts served twice by the real engine, flag off (BF16 draft
head) and flag on (FP8 draft head), and what the evidence says about the two runs.

The FP8 side is read back from the archive, the receipt and diagnostics a user reads; the BF16
side is the same receipt capture of the stock head (``probe``). Used by ``draft-head-fp8 demo``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from draft_head_fp8 import harness
from draft_head_fp8.evidence import diagnostics_path, receipt_path

Progress = Callable[[str], None]
# Bytes per element of the dtypes a head snapshot can name.
_DTYPE_BYTES = {"float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4}


def snapshot_bytes(snapshot: dict | None) -> int | None:
    """Bytes a tensor snapshot describes (numel x element size), None if it cannot tell."""
    if not isinstance(snapshot, dict):
        return None
    size = _DTYPE_BYTES.get(str(snapshot.get("dtype")).removeprefix("torch."))
    numel = snapshot.get("numel")
    return None if size is None or not isinstance(numel, int) else size * numel


def head_bytes(receipt: dict) -> int | None:
    """What one read of the draft head costs: its weight plus its scale, if any."""
    weight = snapshot_bytes(receipt.get("head_weight"))
    scale = snapshot_bytes(receipt.get("head_weight_scale"))
    return None if weight is None else weight + (scale or 0)


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def _engine(
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
) -> dict:
    logs = cache / "logs"
    log = logs / f"{name}.log"
    progress(f"{step} starting vLLM ({name}); log: {log}")
    run = harness.launch(
        target,
        assistant,
        env=harness.engine_env(cache, flag=flag, archive=archive),
        out=logs / f"{name}.json",
        args=args,
        log=log,
        progress=lambda seconds: progress(f"      ... {seconds:.0f} s"),
    )
    if not run.ok:
        raise RuntimeError(
            f"the {name} engine failed (exit {run.returncode}); last lines of {log}:\n{run.tail()}"
        )
    progress(f"      done in {run.seconds:.0f} s")
    return run.facts


def compare(
    target: Path,
    assistant: Path,
    prompts: list[str],
    *,
    cache: Path,
    archive_root: Path,
    max_tokens: int,
    speculative_tokens: int,
    progress: Progress,
) -> dict:
    from draft_head_fp8.archive import Archive
    from draft_head_fp8.evidence.checks import check_results
    from draft_head_fp8.evidence.verdict import receipt_verdict

    args = ("--max-tokens", str(max_tokens), "--speculative-tokens", str(speculative_tokens))
    for prompt in prompts:
        args += ("--prompt", prompt)
    common = dict(target=target, assistant=assistant, cache=cache, archive=archive_root)
    before = _tree(archive_root)
    off = _engine("[2/4]", "flag-off", flag=False, args=args, progress=progress, **common)
    off_wrote_nothing = _tree(archive_root) == before
    boots_before = len(Archive(archive_root).boots()) if archive_root.exists() else 0
    on = _engine(
        "[3/4]", "flag-on", flag=True, args=args + ("--draft-agreement",), progress=progress,
        **common,
    )  # fmt: skip

    progress("[4/4] reading the receipt back from the archive")
    archive = Archive(archive_root)
    boots = archive.boots()
    if len(boots) != boots_before + 1:
        found = len(boots) - boots_before
        raise RuntimeError(f"expected one new boot in {archive_root}, found {found}")
    boot = boots[-1]
    receipt = json.loads(boot.read_bytes(receipt_path(0)))
    record = json.loads(boot.read_bytes(diagnostics_path(0)))
    report = archive.verify()
    hashes = {
        off["after_start"]["target_embed_sha256"],
        on["after_start"]["target_embed_sha256"],
        on["after_generate"]["target_embed_sha256"],
    }
    return {
        "models": {"target": str(target), "assistant": str(assistant)},
        "prompts": prompts,
        "flag_off": off,
        "flag_on": on,
        "texts_identical": off["texts"] == on["texts"],
        "tokens_identical": off["token_ids"] == on["token_ids"],
        "target_embed_unchanged": len(hashes) == 1,
        "flag_off_wrote_nothing": off_wrote_nothing,
        "receipt": {
            "boot": boot.name,
            "path": str(boot.path / receipt_path(0)),
            "valid": receipt_verdict(receipt) is None,
            "checks": check_results(receipt),
            "document": receipt,
        },
        "diagnostics": record,
        "archive": {
            "root": str(archive_root),
            "verify_ok": report.ok,
            "newest": [b.summary() for b in boots[-5:]],
        },
    }
