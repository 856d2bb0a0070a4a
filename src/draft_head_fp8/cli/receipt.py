"""``draft-head-fp8 receipt validate|show``: is this file a valid receipt, and what does it say."""

from __future__ import annotations

import argparse
import json
from typing import Any

from draft_head_fp8.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_command,
    load_json,
)


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "receipt",
        "validate or show runtime receipts",
        "  draft-head-fp8 receipt validate receipts/*.json",
    )
    rsub = p.add_subparsers(dest="receipt_command", metavar="COMMAND", required=True)
    q = add_command(
        rsub,
        "validate",
        "check receipts against their schema (v2 or v3) and every post-share rule",
        "  draft-head-fp8 receipt validate post_share-rank0.json   # exit 1 if any fails",
    )
    q.add_argument("files", nargs="+", metavar="FILE")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=run_validate)
    q = add_command(
        rsub,
        "show",
        "print one receipt as a table, then each check with its result",
        "  draft-head-fp8 receipt show post_share-rank0.json",
    )
    q.add_argument("file", metavar="FILE")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=run_show)


def run_validate(args: argparse.Namespace) -> int:
    from draft_head_fp8.evidence.verdict import receipt_verdict

    results = []
    for path in args.files:
        try:
            reason = receipt_verdict(load_json(path))
        except ValueError as exc:
            reason = str(exc)
        results.append({"file": path, "ok": reason is None, "reason": reason})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(f"{r['file']}: OK" if r["ok"] else f"{r['file']}: FAIL: {r['reason']}")
    return EXIT_OK if all(r["ok"] for r in results) else EXIT_FAILED


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        keys = ("dtype", "shape", "device", "finite", "positive_scalar")
        return ", ".join(f"{k}={value[k]}" for k in keys if k in value)
    return json.dumps(value) if not isinstance(value, str) else value


def run_show(args: argparse.Namespace) -> int:
    from draft_head_fp8.evidence.checks import check_results

    try:
        receipt = load_json(args.file)
    except ValueError as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    if not isinstance(receipt, dict):
        kind = type(receipt).__name__
        raise UsageError(f"{args.file}: a receipt is a JSON object, this is a {kind}")
    if args.json:
        print(json.dumps({"receipt": receipt, "checks": check_results(receipt)}, indent=2))
        return EXIT_OK
    width = max(len(k) for k in receipt) if receipt else 0
    for key in sorted(receipt):
        print(f"{key:<{width}}  {_cell(receipt[key])}")
    print()
    for row in check_results(receipt):
        mark = {True: "pass", False: "FAIL", None: "----"}[row["passed"]]
        detail = f"  ({row['message']})" if row["passed"] is False else ""
        print(f"{mark}  {row['check']}{detail}")
    return EXIT_OK
