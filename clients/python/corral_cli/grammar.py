"""The parts of the command line's grammar every command shares: the parser class, a command
with help that explains it, the global options, the version (arguments.py uses them).

Each command's `--help` starts with one sentence of what it does, then its outcomes and exit
codes. The global options (`--addr`, `--json`, ...) are listed once, in `corral --help`; they
are accepted after the command too (`corral ls --json`): each command repeats them unlisted,
with SUPPRESS defaults, so a value given after the command overrides the one before it and one
not given there leaves it alone.

Must not: call the daemon or print anything but help and usage errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from corral_cli.client import DEFAULT_ADDR, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"
Parents: TypeAlias = "list[Parser]"

EXIT_CODES = (
    "exit codes (every command): 0 ok, 1 failure (an RPC error, a failed or canceled turn), "
    "2 bad request (usage, an unknown or ambiguous id, INVALID_ARGUMENT, NOT_FOUND, "
    "FAILED_PRECONDITION), 3 cancel refused, 4 wait timed out, 130 interrupted, 141 the reader "
    "of stdout went away (a closed pipe: `corral logs ID | head`)"
)
_WIDTH = 88  # of the help's own paragraphs (argparse wraps its option lists itself)
_GLOBALS_NOTE = (
    "global options (--addr, --json, --timeout, --token-file, --tls-ca, --tls-cert, --tls-key) "
    "go before or after the command: see corral --help"
)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors in the CLI's one form: `error: CODE: message` and a hint."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse would swallow a closed pipe here; main.py ends on one the same way always.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        print(f"error: INVALID_ARGUMENT: {message}", file=sys.stderr)
        print(f"hint: {self.prog} --help", file=sys.stderr)
        sys.exit(2)


def version() -> str:
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _paragraph(text: str) -> str:
    return textwrap.fill(text + ".", _WIDTH, break_on_hyphens=False)


def command(
    sub: Subparsers, parents: Parents, name: str, summary: str, outcomes: str
) -> argparse.ArgumentParser:
    """A command whose help is `summary`, then `outcomes`, then the exit codes."""
    return sub.add_parser(
        name,
        parents=parents,
        help=summary[:1].lower() + summary[1:].rstrip("."),
        description=f"{summary}\n\n{outcomes}",
        epilog=f"{_paragraph(EXIT_CODES)}\n{_paragraph(_GLOBALS_NOTE)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_globals(parser: argparse.ArgumentParser, *, listed: bool) -> None:
    """The global options: listed with their defaults in `corral --help`, and accepted
    unlisted, without defaults, after each command."""

    def default(value: object) -> object:
        return value if listed else argparse.SUPPRESS

    def explain(text: str) -> str:
        return text if listed else argparse.SUPPRESS

    parser.add_argument(
        "--addr",
        default=default(os.environ.get("CORRAL_ADDR") or DEFAULT_ADDR),
        help=explain(
            f"daemon address HOST:PORT or unix:PATH (default $CORRAL_ADDR or {DEFAULT_ADDR})"
        ),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help=explain(
            "machine output: one JSON object per line on stdout, with the .proto field names "
            "(as grpcurl prints them); stderr then carries errors only"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT_S),
        metavar="S",
        help=explain(f"seconds to wait for a unary call (default {DEFAULT_TIMEOUT_S:g})"),
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=default(None),
        metavar="FILE",
        help=explain("send the first token in FILE as 'authorization: Bearer' ($CORRAL_TOKEN)"),
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        default=default(None),
        metavar="PEM",
        help=explain("speak TLS, trusting the daemon's certificate if this authority signed it"),
    )
    for flag, what in (("--tls-cert", "client certificate"), ("--tls-key", "its key")):
        parser.add_argument(
            flag,
            type=Path,
            default=default(None),
            metavar="PEM",
            help=explain(f"mutual TLS: {what}"),
        )
