"""The ``draft-head-fp8`` command.

Exit codes scripts can trust: 0 success / eligible / valid, 1 a failed validation or verification,
2 bad usage or input (missing folder, not Gemma 4, unreadable file), 3 ``check``: not eligible.
Errors are one line saying what to do; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INELIGIBLE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the user: exit 2 with the message."""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    def error(message: str) -> None:
        parser.exit(EXIT_USAGE, f"{parser.prog}: error: {message} (see `{parser.prog} --help`)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


def _add(sub: Any, name: str, help_: str, example: str, **kwargs: Any) -> argparse.ArgumentParser:
    return _one_line_errors(
        sub.add_parser(name, help=help_, description=help_, epilog=f"example:\n{example}", formatter_class=_formatter, **kwargs)
    )


# ------------------------------------------------------------------ check


def cmd_check(args: argparse.Namespace) -> int:
    from draft_head_fp8.check import check_assistant, head_bytes
    from draft_head_fp8.checkpoint import CheckpointError

    try:
        result = check_assistant(args.assistant, args.target)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    sizes = head_bytes(result)
    if args.json:
        print(json.dumps({
            "eligible": result.eligible,
            "reason": result.reason,
            "policy_reason": result.decision.reason,
            "receipt_problems": result.receipt_problems,
            "notes": result.notes,
            "assistant": result.assistant,
            "target": result.target,
            "head_bytes": None if sizes is None else {"bf16": sizes[0], "fp8": sizes[1]},
        }, indent=2))
    else:
        a = result.assistant
        head = "centroid (ordered embeddings)" if a["use_ordered_embeddings"] else "dense"
        tie = "tied" if a["tie_word_embeddings"] else "untied"
        print(f"assistant  {a['path']}: {a['model_type']}, hidden {a['hidden_size']}, vocab {a['vocab_size']}, "
              f"{a['dtype']}, {head} head, {tie}")
        if result.target:
            t = result.target
            print(f"target     {t['path']}: {t['model_type']}, hidden {t['hidden_size']}, vocab {t['vocab_size']}, {t['dtype']}")
        if result.eligible:
            saved = "" if sizes is None else f" ({_mib(sizes[0])} -> {_mib(sizes[1])} read per draft step)"
            print(f"verdict    eligible: with VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1 the draft lm_head is served in FP8{saved}")
        else:
            print(f"verdict    not eligible: {result.reason}")
            print("           with the flag on, vLLM will refuse to start with this reason; without it, the head stays BF16")
        for note in result.notes:
            print(f"note       {note}")
    return EXIT_OK if result.eligible else EXIT_INELIGIBLE


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


# ------------------------------------------------------------------ receipt


def _load_json(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except IsADirectoryError:
        raise ValueError("is a folder, not a receipt file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def receipt_verdict(document: Any) -> str | None:
    """None when the receipt is a valid v2 post-share receipt, else the first reason it is not."""
    from draft_head_fp8 import schemas
    from draft_head_fp8.policy import HeadFp8EligibilityError
    from draft_head_fp8.receipt import RECEIPT_SCHEMA, validate_post_share_receipt

    if isinstance(document, dict) and document.get("schema") != RECEIPT_SCHEMA:
        return f"schema {document.get('schema')!r} is not {RECEIPT_SCHEMA!r}"
    problems = schemas.errors(schemas.RECEIPT_V2, document)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"does not match the v2 receipt schema: {problems[0]}{more}"
    try:
        validate_post_share_receipt(document)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    return None


def cmd_receipt_validate(args: argparse.Namespace) -> int:
    results = []
    for path in args.files:
        try:
            reason = receipt_verdict(_load_json(path))
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


def cmd_receipt_show(args: argparse.Namespace) -> int:
    from draft_head_fp8.receipt import check_results

    try:
        receipt = _load_json(args.file)
    except ValueError as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    if not isinstance(receipt, dict):
        raise UsageError(f"{args.file}: a receipt is a JSON object, this is a {type(receipt).__name__}")
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


# ------------------------------------------------------------------ tiny-models


def cmd_tiny_models(args: argparse.Namespace) -> int:
    from draft_head_fp8.tiny import build_tiny_pair

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file; give a folder to write target/ and assistant/ into")
    try:
        pair = build_tiny_pair(out, ordered_embeddings=args.ordered_embeddings, untied=args.untied, seed=args.seed)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"target     {pair.target}")
    print(f"assistant  {pair.assistant}")
    return EXIT_OK


# ------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    from draft_head_fp8.archive_cli import add_archive_parser

    parser = _one_line_errors(argparse.ArgumentParser(
        prog="draft-head-fp8",
        description="Serve only the speculative draft model's LM head in FP8 inside vLLM, prove it at "
                    "every start with a receipt, and keep each boot's proof in a write-once archive.\n\n"
                    "The vLLM plugin is switched on by VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1; this command "
                    "shows, checks and inspects.",
        epilog="examples:\n"
               "  draft-head-fp8 demo                          # the whole product on tiny real models\n"
               "  draft-head-fp8 check ./gemma-4-31b-assistant # would the flag quantize this head?\n"
               "  draft-head-fp8 archive verify                # every boot's proof intact?",
        formatter_class=_formatter,
    ))
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _add(sub, "demo", "run vLLM with the BF16 and then the FP8 draft head on tiny real models and compare",
             "  draft-head-fp8 demo --json demo.json")
    from draft_head_fp8.demo import add_arguments as add_demo_arguments

    add_demo_arguments(p)

    p = _add(sub, "check", "say from configs alone whether the flag would serve this assistant's head in FP8",
             "  draft-head-fp8 check ./assistant --target ./target   # exit 0 eligible, 3 not")
    p.add_argument("assistant", metavar="ASSISTANT_DIR", help="the MTP assistant's model folder")
    p.add_argument("--target", metavar="TARGET_DIR", help="the target's model folder (for dtype and shape checks)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_check)

    p = _add(sub, "receipt", "validate or show runtime receipts",
             "  draft-head-fp8 receipt validate receipts/*.json")
    rsub = p.add_subparsers(dest="receipt_command", metavar="COMMAND", required=True)
    q = _add(rsub, "validate", "check receipts against the v2 schema and every post-share rule",
             "  draft-head-fp8 receipt validate post_share-rank0.json   # exit 1 if any fails")
    q.add_argument("files", nargs="+", metavar="FILE")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_receipt_validate)
    q = _add(rsub, "show", "print one receipt as a table, then each check with its result",
             "  draft-head-fp8 receipt show post_share-rank0.json")
    q.add_argument("file", metavar="FILE")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_receipt_show)

    p = _add(sub, "tiny-models", "write a tiny random Gemma 4 target and MTP assistant (seconds, no network)",
             "  draft-head-fp8 tiny-models /tmp/pair --ordered-embeddings   # a pair the flag must refuse")
    p.add_argument("out", metavar="OUT", help="folder to create target/ and assistant/ in")
    p.add_argument("--ordered-embeddings", action="store_true", help="E2B/E4B-style centroid head (refused)")
    p.add_argument("--untied", action="store_true", help="head not tied to the draft embedding (refused)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_tiny_models)

    add_archive_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        if args.debug:
            raise
        print(f"draft-head-fp8 {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if args.debug:
            raise
        print(f"draft-head-fp8 {args.command}: error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
