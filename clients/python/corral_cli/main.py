"""`corral`: the command line. Owns the argument grammar, the global options, dispatch to the
command modules, and the one place where a failed RPC becomes a message and an exit code.

`corral serve ...` hands every argument after `serve` to the daemon's own parser
(corral_server.daemon); the other commands are clients of a running daemon and never import
the server.

Exit codes: 0 ok, 1 failure (RPC error, failed turn), 2 bad request (usage, INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION), 3 cancel refused, 4 wait timed out, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

import grpc

from corral_cli import commands, failure, follow, ids, providers, subagents
from corral_cli.client import (
    DEFAULT_ADDR,
    DEFAULT_TIMEOUT_S,
    Access,
    AccessError,
    Client,
    connect,
    load_access,
)
from corral_cli.render import Console

Command = Callable[[Client, Console, argparse.Namespace], int]
# A command's own usage checks, before anything is sent: the error, or "".
Check = Callable[[argparse.Namespace], str]
# argparse's classes are generic to the type checker only.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Parents: TypeAlias = list[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    """The grammar. The global options are accepted before the command and after it (`corral
    --json ls` and `corral ls --json`): each subcommand repeats them with SUPPRESS defaults,
    so a value given after the command overrides the one before it, and one not given there
    leaves it alone."""
    parser = argparse.ArgumentParser(
        prog="corral", description="Run, steer and watch AI coding agents through corral."
    )
    _add_globals(parser, defaults=True)
    globals_after = argparse.ArgumentParser(add_help=False)
    _add_globals(globals_after, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "serve", add_help=False, help="run the daemon (all arguments go to it; try serve --help)"
    )
    parents = [globals_after]
    _add_run(sub, parents)
    _add_send(sub, parents)
    _add_ls(sub, parents)
    _add_logs(sub, parents)
    cancel = sub.add_parser("cancel", parents=parents, help="cancel the agent's running turn")
    _add_agent(cancel)
    cancel.set_defaults(func=commands.cancel)
    wait = sub.add_parser("wait", parents=parents, help="wait until the agent is idle (or errored)")
    _add_agent(wait)
    wait.add_argument(
        "--for", dest="timeout_s", type=float, default=None, metavar="S", help="give up after S"
    )
    wait.set_defaults(func=commands.wait)
    close = sub.add_parser("close", parents=parents, help="close an agent (its record stays)")
    _add_agent(close)
    close.set_defaults(func=commands.close)
    reload = sub.add_parser(
        "reload", parents=parents, help="restart the agent's provider session (same agent id)"
    )
    _add_agent(reload)
    reload.add_argument(
        "--rehydrate",
        action="store_true",
        help="rebuild the timeline from the provider's history under a new epoch",
    )
    reload.set_defaults(func=commands.reload)
    archive = sub.add_parser(
        "archive", parents=parents, help="archive an agent and its descendants (closes them)"
    )
    _add_agent(archive)
    archive.set_defaults(func=commands.archive)
    permit = sub.add_parser("permit", parents=parents, help="answer a pending permission")
    _add_agent(permit)
    permit.add_argument(
        "request", nargs="?", default="", help="its id (default: the only one pending)"
    )
    permit.add_argument("--deny", action="store_true", help="deny instead of allow")
    permit.add_argument("--message", "-m", default="", help="a note for the agent")
    permit.set_defaults(func=commands.permit)
    queued = sub.add_parser(
        "queued", parents=parents, help="list the agent's queued prompts, or print one in full"
    )
    _add_agent(queued)
    queued.add_argument(
        "prompt_id", nargs="?", default="", metavar="PROMPT_ID", help="its client_message_id"
    )
    queued.set_defaults(func=commands.queued)
    rewind = sub.add_parser(
        "rewind",
        parents=parents,
        help="rewind the timeline to before a user message the provider confirmed",
    )
    _add_agent(rewind)
    rewind.add_argument(
        "message_id", metavar="MESSAGE_ID", help="the provider's id of the message (see logs)"
    )
    rewind.set_defaults(func=commands.rewind)
    imported = sub.add_parser(
        "import",
        parents=parents,
        help="make an agent of an existing provider session (its conversation as history)",
    )
    imported.add_argument("provider", metavar="PROVIDER", help="e.g. claude-code, codex")
    imported.add_argument("session_id", metavar="SESSION_ID", help="the provider's session id")
    imported.add_argument("--cwd", default=None, help="working directory (default: here)")
    imported.set_defaults(func=commands.import_agent)
    listed = sub.add_parser(
        "providers", parents=parents, help="list the providers: kind, available (or why not)"
    )
    listed.set_defaults(func=providers.providers)
    subagents.add_commands(sub, parents)  # spawn, runs, kill-run
    return parser


def _add_globals(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--addr",
        default=default(os.environ.get("CORRAL_ADDR") or DEFAULT_ADDR),
        help=f"daemon address HOST:PORT or unix:PATH (default $CORRAL_ADDR or {DEFAULT_ADDR})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="machine output: one JSON object per line",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT_S),
        metavar="S",
        help=f"seconds to wait for a unary call (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=default(None),
        metavar="FILE",
        help="send the first token in FILE as 'authorization: Bearer' (default $CORRAL_TOKEN)",
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        default=default(None),
        metavar="PEM",
        help="speak TLS, trusting the daemon's certificate if this authority signed it",
    )
    for flag, what in (("--tls-cert", "client certificate"), ("--tls-key", "its key")):
        parser.add_argument(
            flag, type=Path, default=default(None), metavar="PEM", help=f"mutual TLS: {what}"
        )


def _add_agent(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("agent", help="an agent id, or any unique prefix of one")


def _add_prompt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "prompt", nargs="+", metavar="PROMPT", help="prompt words, joined by spaces; - = stdin"
    )


def _add_run(sub: Subparsers, parents: Parents) -> None:
    run = sub.add_parser("run", parents=parents, help="create an agent and stream its first turn")
    run.add_argument("--provider", default="scripted", help="default %(default)s")
    run.add_argument("--cwd", default=None, help="working directory (default: here)")
    run.add_argument("--title", default="")
    run.add_argument(
        "--label", action="append", default=[], metavar="K=V", help="a label (repeatable)"
    )
    run.add_argument("--model", default="")
    run.add_argument("--mode", default="")
    _add_prompt(run)
    run.set_defaults(func=commands.run)


def _add_send(sub: Subparsers, parents: Parents) -> None:
    send = sub.add_parser("send", parents=parents, help="send a prompt to an agent")
    _add_agent(send)
    _add_prompt(send)
    send.add_argument("-f", "--follow", action="store_true", help="stream the turn like run")
    send.add_argument(
        "--if-running",
        choices=tuple(commands.IF_RUNNING),
        default="reject",
        help="when a turn is already running (default %(default)s)",
    )
    for mode, what in (
        ("queue", "run it after the running turn"),
        ("steer", "into the running turn if the agent can, else queued"),
        ("replace", "cancel the running turn and run this instead"),
    ):
        send.add_argument(
            f"--{mode}", dest="if_running", action="store_const", const=mode, help=what
        )
    send.set_defaults(func=commands.send)


def _add_ls(sub: Subparsers, parents: Parents) -> None:
    ls = sub.add_parser("ls", parents=parents, help="list agents")
    ls.add_argument("--selector", "-l", default="", help="labels: k=v,k!=v,k")
    ls.add_argument("--all", action="store_true", help="include archived agents")
    ls.add_argument(
        "--parent", default="", metavar="ID", help="only children of this agent (id or prefix)"
    )
    ls.set_defaults(func=commands.ls)


def _add_logs(sub: Subparsers, parents: Parents) -> None:
    logs = sub.add_parser("logs", parents=parents, help="print an agent's timeline")
    _add_agent(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="follow new rows live")
    logs.add_argument(
        "--limit", type=int, default=200, metavar="N", help="last N rows (0 = all; default 200)"
    )
    logs.add_argument(
        "--until-idle",
        action="store_true",
        help="with -f: exit once the agent is idle or errored (at once if it already is)",
    )
    logs.set_defaults(func=follow.logs, check=follow.check)
    attach = sub.add_parser(
        "attach", parents=parents, help="follow an agent's output live from now, no history"
    )
    _add_agent(attach)
    attach.set_defaults(func=follow.attach)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        return exc.code if isinstance(exc.code, int) else failure.EXIT_BAD_REQUEST
    except KeyboardInterrupt:
        return failure.EXIT_INTERRUPTED


def _main(argv: list[str]) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "serve":
        from corral_server import daemon  # only `serve` needs the server

        return daemon.main(extra, prog="corral serve")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    console = Console(json=args.json)
    check: Check | None = getattr(args, "check", None)
    usage_error = check(args) if check is not None else ""
    if usage_error:
        console.note(f"error: {usage_error}")
        return failure.EXIT_BAD_REQUEST
    func: Command = args.func
    try:
        access = _access(args)
    except AccessError as exc:
        console.note(f"error: {exc}")
        return failure.EXIT_BAD_REQUEST
    with connect(args.addr, args.timeout, access) as client:
        try:
            _resolve_agents(client, args)
            return func(client, console, args)
        except ids.AgentIdError as exc:
            console.note(f"error: {exc}")
            return failure.EXIT_BAD_REQUEST
        except grpc.RpcError as exc:
            failed = failure.decode(exc)
            for line in failure.describe(failed, args.addr):
                console.note(line)
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
