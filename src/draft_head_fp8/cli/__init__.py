"""The ``draft-head-fp8`` command: one module per subcommand, assembled here.

Exit codes scripts can trust (``_common``): 0 success, 1 a failed validation or verification,
2 bad usage or input, 3 not eligible. Errors are one line saying what to do; ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import argparse
import sys

from draft_head_fp8.cli import check, compare, demo, receipt, tiny_models
from draft_head_fp8.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    formatter,
    one_line_errors,
)

DESCRIPTION = (
    "Serve only the speculative draft model's LM head in FP8 inside vLLM, prove it at every "
    "start with a receipt, and keep each boot's proof in a write-once archive.\n\n"
    "The vLLM plugin is switched on by VLLM_EXPERIMENTAL_DRAFT_HEAD_FP8=1; this command shows, "
    "checks and inspects."
)
EXAMPLES = (
    "examples:\n"
    "  draft-head-fp8 demo                          # the whole product on tiny real models\n"
    "  draft-head-fp8 compare --target T --assistant A  # the same on your own pair\n"
    "  draft-head-fp8 check ./assistant             # would the flag quantize this head?\n"
    "  draft-head-fp8 archive verify                # every boot's proof intact?"
)


def build_parser() -> argparse.ArgumentParser:
    from draft_head_fp8.cli.archive import add_archive_parser

    parser = one_line_errors(
        argparse.ArgumentParser(
            prog="draft-head-fp8",
            description=DESCRIPTION,
            epilog=EXAMPLES,
            formatter_class=formatter,
        )
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks instead of one-line errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (demo, compare, check, receipt, tiny_models):
        command.add_parser(sub)
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
        print(
            f"draft-head-fp8 {args.command}: error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED
