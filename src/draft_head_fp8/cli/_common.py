"""What every subcommand shares: exit codes scripts can trust, one-line errors, help layout.

Exit codes: 0 success / eligible / valid, 1 a failed validation or verification, 2 bad usage or
input (missing folder, no drafter this package serves, unreadable file), 3 ``check`` or
``compare``: not eligible.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INELIGIBLE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the user: exit 2 with the message."""


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    def error(message: str) -> None:
        parser.exit(EXIT_USAGE, f"{parser.prog}: error: {message} (see `{parser.prog} --help`)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


def add_command(
    sub: Any, name: str, help_: str, example: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does and shows an example."""
    epilog = example if example.startswith("example") else f"example:\n{example}"
    parser = sub.add_parser(
        name, help=help_, description=help_, epilog=epilog, formatter_class=formatter, **kwargs
    )
    return one_line_errors(parser)


def load_json(path: str) -> Any:
    """A JSON file, or ValueError saying in a few words why it is not one."""
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


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"
