"""The table ``compare`` and ``demo`` print: both runs side by side, then what was proven, then
the receipt's checks and where the boot sits in the archive. Every figure is read from the two
runs' facts (measured in that run, on that machine); the one figure from elsewhere says where it
was measured."""

from __future__ import annotations

from typing import Any

from draft_head_fp8.cli._common import mib
from draft_head_fp8.comparison import served_head_bytes, snapshot_bytes
from draft_head_fp8.evidence.diagnostics import describe_paths
from draft_head_fp8.machine import this_machine

# Measured in the real engine at 1024 x 262144 with the flag's defaults, batch 1
# (bench/real_size.py, docs/benchmarks.md), per CPU kind (``Machine.isa``): the FP8 head +
# certified pick against the BF16 head's time per call. AVX2 and AVX512 without BF16 have no
# figure: vLLM's W8A16 op is not in their kernels and the flag refuses by default.
REAL_SIZE_BY_KIND = {
    "AVX512 + AVX512-BF16": ("0.55x", "a 2-core AVX512-BF16 EPYC (no AMX)"),
    "AVX512 + AVX512-BF16 + AMX-TILE": ("0.60x", "a 2-core AMX Xeon (Sapphire Rapids class)"),
}


def real_size_note(isa: str) -> str:
    """The real-size figure of this CPU's kind where one was measured, saying where; else
    every kind's, saying that none is this one's."""
    if isa in REAL_SIZE_BY_KIND:
        ratio, where = REAL_SIZE_BY_KIND[isa]
        return (
            f"at 1024 x 262144 the FP8 head + pick took {ratio} the BF16 head's time per call at "
            f"batch 1, and from 8 rows the BF16 rows served (real engine, measured on {where}, "
            "a CPU of this kind, not this one: docs/benchmarks.md)"
        )
    measured = "; ".join(f"{ratio} on {where}" for ratio, where in REAL_SIZE_BY_KIND.values())
    return (
        f"at 1024 x 262144 the FP8 head + pick took {measured} the BF16 head's time per call at "
        f"batch 1 (real engine, measured on a 2-core CPU of each of those kinds, not this one: "
        f"none on this {isa} kind; docs/benchmarks.md)"
    )


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.2f} KiB"


def _rate(f: dict) -> str:
    if f["acceptance_rate"] is None:
        return "no drafts"
    counts = f"{f['accepted_tokens']}/{f['draft_tokens']}"
    return f"{f['acceptance_rate']:.1%} (mean length {f['mean_acceptance_length']:.2f}; {counts})"


def _ms(f: dict) -> str:
    ms = f["draft_head_ms_per_call"]
    return "-" if ms is None else f"{ms:.3f} ms (median of {f['draft_head_calls']} calls)"


def _memory(f: dict) -> str:
    if f["peak_device_bytes"]:
        return f"{mib(f['peak_device_bytes'])} (GPU, largest rank)"
    return "-" if f["peak_rss_bytes"] is None else f"{mib(f['peak_rss_bytes'])} (RSS)"


def _shape(receipt: dict) -> str:
    weight = receipt["head_weight"] or {}
    text = f"{weight.get('shape')} {str(weight.get('dtype')).removeprefix('torch.')}"
    layout = receipt.get("head_weight_layout")
    if layout and layout != "plain":
        text += f", {layout} (logical {receipt.get('head_weight_logical_shape')})"
    return text


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def _runner(observed: dict, key: str) -> str:
    """Which of vLLM's model runners served (V1 or Model Runner V2), and its class or its
    speculator's, module-qualified."""
    runner = observed.get("runner") or {}
    return (
        f"{runner.get('name', '?')}: {runner.get(key)}"
        if key == "model_runner"
        else str(runner.get(key))
    )


def _head_rows(facts: dict) -> list[tuple[str, str, str]]:
    off, on = facts["flag_off"], facts["flag_on"]
    a = off["after_start"]["receipt"]  # the stock head, observed (rank 0)
    b = facts["receipt"]["document"]  # the FP8 head, as archived (rank 0)
    fa, fb = facts["figures"]["flag_off"], facts["figures"]["flag_on"]
    pick = facts["diagnostics"].get("exact_pick") or {}
    shared = pick.get("rows_source") == "target_lm_head"
    rows_bytes = 0 if shared else snapshot_bytes(pick.get("rows")) or 0
    fp8 = served_head_bytes(b) or 0
    if shared:
        memory = f"{_kib(fp8)} added (the FP8 copy; the pick reads the target head's rows)"
    elif rows_bytes:
        memory = f"{_kib(fp8 + rows_bytes)} (FP8 + the BF16 rows of the exact pick)"
    else:
        memory = _kib(served_head_bytes(b))
    rows = [
        ("model runner", *(_runner(f["after_start"], "model_runner") for f in (off, on))),
        ("speculator", *(_runner(f["after_start"], "speculator") for f in (off, on))),
        ("drafter", on["after_start"]["family"], f"{on['after_start']['drafter_class']}"),
        ("draft head method", a["head_method"], b["head_method"]),
        ("draft head kernel", a["head_kernel"] or "unquantized GEMM", b["head_kernel"]),
        ("draft head weight (rank 0)", _shape(a), _shape(b)),
        ("draft head bytes per read", _kib(served_head_bytes(a)),
         _kib(served_head_bytes(b)) + " incl. scale"),
        ("draft head memory", _kib(served_head_bytes(a)), memory),
        ("draft tokens", "the BF16 head's", pick.get("guarantee", "-")),
        ("draft head time per call", _ms(fa), _ms(fb)),
        ("draft acceptance", _rate(fa), _rate(fb)),
    ]  # fmt: skip
    agreement = on.get("draft_agreement") or {}
    if facts["draft_tokens_identical"] is not None:
        share = f"{agreement['agree']}/{agreement['steps']} ({facts['draft_tokens_identical']:.1%})"
        rows.append(("FP8 draft token == BF16 draft token", "-", share))
    counts = facts.get("certificate")
    if counts:
        said = (
            f"{counts['stage_a']} by the top-k, {counts['stage_b']} by the wider rescoring, "
            f"{counts['stage_c']} from the BF16 rows"
            + (f", {counts['uncertified']} uncertified" if counts["uncertified"] else "")
        )
        rows.append(("draft rows certified", "-", said))
    return rows


def _serving_rows(facts: dict) -> list[tuple[str, str, str]]:
    off, on = facts["flag_off"], facts["flag_on"]
    a, b = off["after_start"]["receipt"], facts["receipt"]["document"]
    fa, fb = facts["figures"]["flag_off"], facts["figures"]["flag_on"]
    tps = [f"{f['tokens_per_second']:.1f}" if f["tokens_per_second"] else "-" for f in (fa, fb)]
    embed_after = (
        "same after generation" if facts["target_embed_unchanged"] else "CHANGED after generation"
    )
    return [
        ("generation tokens/s", tps[0], tps[1]),
        ("peak memory", _memory(fa), _memory(fb)),
        ("target head",
         f"{a['target_lm_head_method']}, {(a['target_lm_head_weight'] or {}).get('dtype')}",
         f"{b['target_lm_head_method']}, {(b['target_lm_head_weight'] or {}).get('dtype')}"),
        ("target head sha256", off["after_start"]["target_head_sha256"][:16] + "...",
         on["after_start"]["target_head_sha256"][:16] + "... "
         + ("(same after generation)" if facts["target_head_unchanged"] else "(CHANGED)")),
        ("target embedding sha256", off["after_start"]["target_embed_sha256"][:16] + "...",
         on["after_start"]["target_embed_sha256"][:16] + f"... ({embed_after})"),
        ("draft embedding is the target's", a["draft_embed_weight_is_target_embed"],
         b["draft_embed_weight_is_target_embed"]),
    ]  # fmt: skip


def _table(rows: list[tuple[str, Any, Any]]) -> list[str]:
    rows = [(label, str(left), str(right)) for label, left, right in rows]
    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows)
    head = f"{'':<{width}}  {'flag off (BF16 draft head)':<{left}}  flag on (FP8 draft head)"
    body = [f"{label:<{width}}  {value:<{left}}  {right}" for label, value, right in rows]
    return ["", head, *body]


def _paths(facts: dict) -> list[str]:
    """Which path served which batch size in the flag-on run, and why (as measured at load)."""
    record = facts["diagnostics"]["head"].get("batch_paths") or {}
    lines = [f"batch paths: {describe_paths(record)}"] if record else []
    slower = [
        rows
        for rows, on in (facts["figures"]["flag_on"]["draft_head_by_rows"] or {}).items()
        if on["median_s"] > ((facts["figures"]["flag_off"]["draft_head_by_rows"] or {})
                             .get(rows, {}).get("median_s", float("inf")))
    ]  # fmt: skip
    if slower:
        lines.append(
            f"note: in this run the flag-on head was slower per call at {', '.join(slower)} "
            f"row(s); a head this small ({_kib(served_head_bytes(facts['receipt']['document']))}) "
            f"costs its fixed per-call work, not its bytes; {real_size_note(this_machine().isa)}"
        )
    return lines


def _proof(facts: dict) -> list[str]:
    diag = facts["diagnostics"]["head"]
    checkpoint = diag["checkpoint"] or {}
    made_from = diag["provenance_verified"] and diag["source_sha256"] == checkpoint.get("sha256")
    lines = [
        "",
        f"final texts identical: {_yes(facts['texts_identical'])}"
        f"   vLLM's spec-decode counters identical: {_yes(facts['spec_decode_identical'])}"
        f"   target embedding and head unchanged: "
        f"{_yes(facts['target_embed_unchanged'] and facts['target_head_unchanged'])}"
        f"   flag-off run wrote nothing: {_yes(facts['flag_off_wrote_nothing'])}",
        f"FP8 bytes made from the checkpoint's {checkpoint.get('tensor')}: {_yes(made_from)} "
        f"(sha256 {diag['source_sha256'][:16]}...); scale {diag['scale']:.3e}; "
        f"largest/median row amax {diag['row_amax_ratio']:.2f}",
    ]
    if diag.get("kernel_warning"):
        lines.append(f"warning: {diag['kernel_warning']}")
    return lines + _paths(facts)


def _receipt(facts: dict) -> list[str]:
    receipt = facts["receipt"]
    ranks = receipt["ranks"]
    scope = f", {ranks['tp_size']} ranks" if ranks else ""
    verdict = "VALID" if receipt["valid"] else "INVALID: " + "; ".join(receipt["reasons"])
    version = receipt["schema"].rsplit("/", 1)[-1]
    lines = ["", f"receipt {receipt['path']} ({version}{scope}): {verdict}"]
    for check in receipt["checks"]:
        mark = {True: "pass", False: "FAIL", None: "----"}[check["passed"]]
        lines.append(f"  {mark}  {check['check']}")
    return lines


def _archive(facts: dict) -> list[str]:
    archive, boot_name = facts["archive"], facts["receipt"]["boot"]
    verified = "ok" if archive["verify_ok"] else "PROBLEMS"
    lines = ["", f"archive {archive['root']} (verify: {verified}), newest boots:"]
    for boot in archive["newest"]:
        marker = "  <- this run" if boot.get("boot") == boot_name else ""
        lines.append(
            f"  {boot.get('seq'):>4}  {boot.get('status'):<10}  {boot.get('started_at')}  "
            f"{boot.get('launch_id')}  {boot.get('files')} files{marker}"
        )
    lines += ["", f"see it again: draft-head-fp8 archive show -1 --root {archive['root']}"]
    return lines


def render(facts: dict) -> str:
    rows = _head_rows(facts) + _serving_rows(facts)
    return "\n".join(_table(rows) + _proof(facts) + _receipt(facts) + _archive(facts))
