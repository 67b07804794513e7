"""`corral fork AGENT MESSAGE_ID`: a new agent holding AGENT's conversation before a user
message, its provider session continuing from there (ForkAgent). Prints the new agent's id.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import agent_service_pb2 as svc_pb
from corral_cli import failure, ids
from corral_cli.client import Client, parse_labels
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console

# How the fork's session continues, as the line after the id says it.
_SESSIONS = {
    svc_pb.FORK_SESSION_PROVIDER: "the provider's own fork",
    svc_pb.FORK_SESSION_CONTEXT: "a new session primed with the conversation",
    svc_pb.FORK_SESSION_NEW: "a new session",
}


def add_fork(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "fork",
        "Make a new agent of AGENT's conversation up to before a user message.",
        "MESSAGE_ID is the message's id as `logs` shows it (`(message ID)`), or the id it was\n"
        "sent under. The source is left as it is. Prints the new agent's id, then the rows it\n"
        "holds and how its session continues (the provider's own fork, or a new session\n"
        "primed with a summary of the conversation). A provider with a fork of its own needs\n"
        "a message it confirmed: MESSAGE_NOT_CONFIRMED otherwise (exit 2).",
    )
    cmd.add_argument("agent", help="an agent id, or any unique prefix of one")
    cmd.add_argument("message_id", metavar="MESSAGE_ID", help="the user message to fork before")
    cmd.add_argument("--title", default="", help="the fork's title (default: its first prompt's)")
    cmd.add_argument(
        "--label", action="append", default=[], metavar="K=V", help="a label (repeatable)"
    )
    cmd.set_defaults(func=fork)


def fork(client: Client, console: Console, args: argparse.Namespace) -> int:
    try:
        labels = parse_labels(args.label)
    except ValueError as exc:
        console.error(f"error: INVALID_ARGUMENT: {exc} (no agent created)")
        return failure.EXIT_BAD_REQUEST
    request = svc_pb.ForkAgentRequest(
        agent_id=ids.resolve(client, args.agent),
        message_id=args.message_id,
        title=args.title,
        labels=labels,
    )
    reply = client.agents.ForkAgent(request, timeout=None)
    if console.json:
        console.message(reply)
        return failure.EXIT_OK
    console.line(reply.agent.id)
    rows = f"{reply.rows} row{'' if reply.rows == 1 else 's'}"
    console.line(f"forked from {request.agent_id}: {rows}, {_SESSIONS.get(reply.session, '?')}")
    return failure.EXIT_OK
