"""`corral`: the command line. Owns dispatch to the command modules (the grammar is
arguments.py), and the one place where a failed RPC, or a closed stdout, becomes a message and
an exit code.

`corral serve ...` hands every argument after `serve` to the daemon's own parser
(corral_server.daemon); the other commands are clients of a running daemon and never import
the server. `corral completion SHELL` calls no daemon.

Exit codes: 0 ok, 1 failure (RPC error, failed turn), 2 bad request (usage, INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION), 3 cancel refused, 4 wait timed out, 130 interrupted, 141 stdout
closed by its reader (`corral logs ID | head`: quietly, with the status a shell reports for
`git log | head`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import TextIO

import grpc

from corral_cli import completion, failure, ids, server_info
from corral_cli.arguments import build_parser
from corral_cli.client import Access, AccessError, Client, connect, load_access
from corral_cli.render import Console
from corral_cli.server_info import VersionRequested

Command = Callable[[Client, Console, argparse.Namespace], int]
# A command's own usage checks, before anything is sent: the error, or "".
Check = Callable[[argparse.Namespace], str]


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    """`out`: where answers go (default: sys.stdout), so a caller running commands on
    several threads of one process gives each its own stream instead of swapping sys.stdout."""
    try:
        return _main(sys.argv[1:] if argv is None else argv, out)
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else failure.EXIT_BAD_REQUEST
    except KeyboardInterrupt:
        return failure.EXIT_INTERRUPTED
    except RuntimeError as error:  # Ctrl-C inside grpc's blocking wait (failure.interrupted)
        if not failure.interrupted(error):
            raise
        return failure.EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_closed_pipes()
        return failure.EXIT_PIPE_CLOSED


def _silence_closed_pipes() -> None:
    """Point stdout and stderr at /dev/null, so the interpreter's last flush of what could not
    be written fails quietly instead of printing a traceback at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        # Not a real file (a test's capture): nothing to flush.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)


def _main(argv: list[str], out: TextIO | None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except VersionRequested:
        return server_info.print_versions(argv)
    if args.command == "serve":
        from corral_server import daemon  # only `serve` needs the server

        return daemon.main(extra, prog="corral serve")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    console = Console(json=args.json) if out is None else Console(json=args.json, out=out)
    if args.command == "completion":
        console.line(completion.script(parser, args.shell))
        return failure.EXIT_OK
    check: Check | None = getattr(args, "check", None)
    usage_error = check(args) if check is not None else ""
    if usage_error:
        console.error(f"error: INVALID_ARGUMENT: {usage_error}")
        console.error(f"hint: corral {args.command} --help")
        return failure.EXIT_BAD_REQUEST
    func: Command = args.func
    try:
        access = _access(args)
    except AccessError as exc:
        console.error(f"error: INVALID_ARGUMENT: {exc}")
        return failure.EXIT_BAD_REQUEST
    with connect(args.addr, args.timeout, access) as client:
        try:
            _resolve_agents(client, args)
            return func(client, console, args)
        except ids.AgentIdError as exc:
            console.error(f"error: {exc.code}: {exc}")
            return failure.EXIT_BAD_REQUEST
        except grpc.RpcError as exc:
            failed = failure.decode(exc)
            for line in failure.describe(failed, args.addr):
                console.error(line)
            return failed.exit_code


def _access(args: argparse.Namespace) -> Access:
    env_token = os.environ.get("CORRAL_TOKEN", "")
    return load_access(args.token_file, env_token, args.tls_ca, args.tls_cert, args.tls_key)


def _resolve_agents(client: Client, args: argparse.Namespace) -> None:
    """Every agent argument (`agent`, `ls --parent`) from a unique prefix to the whole id."""
    if getattr(args, "agent", None) is not None:
        args.agent = ids.resolve(client, args.agent)
    if getattr(args, "parent", ""):
        args.parent = ids.resolve(client, args.parent)


if __name__ == "__main__":
    sys.exit(main())
