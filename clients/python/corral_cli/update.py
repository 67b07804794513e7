"""`corral update AGENT`: change an agent's mode, model or title (UpdateAgent).

A new mode or model of a live agent goes to its running session; a provider that cannot change
it live answers FAILED_PRECONDITION with its reason, which main.py prints (exit code as for
every refusal).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as svc_pb
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console

_FIELDS = ("mode", "model", "title")


def add_command(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "update",
        "Change an agent's mode, model or title.",
        "A mode or model goes to the agent's running session at once (`corral providers` lists\n"
        "what each provider offers); a provider that cannot change it live refuses, and\n"
        "nothing changes. Prints the agent's mode, model and title.",
    )
    cmd.add_argument("agent", help="an agent id, or any unique prefix of one")
    for name in _FIELDS:
        cmd.add_argument(f"--{name}", default=None, help=f"the new {name}")
    cmd.set_defaults(func=update, check=check)


def check(args: argparse.Namespace) -> str:
    if all(getattr(args, name) is None for name in _FIELDS):
        return "name at least one of --mode, --model, --title"
    return ""


def update(client: Client, console: Console, args: argparse.Namespace) -> int:
    paths = [name for name in _FIELDS if getattr(args, name) is not None]
    request = svc_pb.UpdateAgentRequest(
        agent_id=args.agent, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )
    for name in paths:
        setattr(request, name, getattr(args, name))
    agent = client.agents.UpdateAgent(request, timeout=client.timeout_s).agent
    said = f"{agent.id} mode {agent.mode or '-'}, model {agent.model or '-'}"
    console.message(agent) if console.json else console.line(f"{said}, title {agent.title or '-'}")
    return failure.EXIT_OK
