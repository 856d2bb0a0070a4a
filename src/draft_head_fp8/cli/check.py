"""``draft-head-fp8 check``: would the flag serve this assistant's head in FP8? Configs alone."""

from __future__ import annotations

import argparse
import json
from typing import Any

from draft_head_fp8.cli._common import (
    EXIT_INELIGIBLE,
    EXIT_OK,
    UsageError,
    add_command,
    mib,
)


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "check",
        "say from configs alone whether the flag would serve this assistant's head in FP8",
        "  draft-head-fp8 check ./assistant --target ./target   # exit 0 eligible, 3 not",
    )
    p.add_argument("assistant", metavar="ASSISTANT_DIR", help="the MTP assistant's model folder")
    p.add_argument(
        "--target", metavar="TARGET_DIR", help="the target's model folder (dtype and shape checks)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from draft_head_fp8.checkpoint import CheckpointError
    from draft_head_fp8.preflight import check_assistant, head_bytes

    try:
        result = check_assistant(args.assistant, args.target)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    sizes = head_bytes(result)
    if args.json:
        report = {
            "eligible": result.eligible,
            "reason": result.reason,
            "policy_reason": result.decision.reason,
            "receipt_problems": result.receipt_problems,
            "notes": result.notes,
            "assistant": result.assistant,
            "target": result.target,
            "head_bytes": None if sizes is None else {"bf16": sizes[0], "fp8": sizes[1]},
        }
        print(json.dumps(report, indent=2))
        return EXIT_OK if result.eligible else EXIT_INELIGIBLE
    a = result.assistant
    head = "centroid (ordered embeddings)" if a["use_ordered_embeddings"] else "dense"
    tie = "tied" if a["tie_word_embeddings"] else "untied"
    print(
        f"assistant  {a['path']}: {a['model_type']}, hidden {a['hidden_size']}, "
        f"vocab {a['vocab_size']}, {a['dtype']}, {head} head, {tie}"
    )
    if result.target:
        t = result.target
        print(
            f"target     {t['path']}: {t['model_type']}, hidden {t['hidden_size']}, "
            f"vocab {t['vocab_size']}, {t['dtype']}"
        )
    if result.eligible:
        saved = (
            "" if sizes is None else f" ({mib(sizes[0])} -> {mib(sizes[1])} read per draft step)"
        )
        print(
            "verdict    eligible: with VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1 the draft lm_head is "
            f"served in FP8{saved}"
        )
    else:
        print(f"verdict    not eligible: {result.reason}")
        print(
            "           with the flag on, vLLM will refuse to start with this reason; "
            "without it, the head stays BF16"
        )
    for note in result.notes:
        print(f"note       {note}")
    return EXIT_OK if result.eligible else EXIT_INELIGIBLE
