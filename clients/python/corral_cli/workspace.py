"""`corral worktree rm AGENT [--force]`: an agent's git worktree (WorkspaceService).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.grammar import Parents, Parser, Subparsers, command
from corral_cli.render import Console


def add_commands(sub: Subparsers, parents: Parents) -> None:
    worktree = command(
        sub,
        [],
        "worktree",
        "An agent's git worktree (made by `run --worktree`).",
        "`corral worktree rm AGENT` removes a closed agent's worktree directory; its branch is\n"
        "kept. A worktree with uncommitted changes is refused (WORKSPACE_DIRTY, exit 2) unless\n"
        "--force, which loses them.",
    )
    actions = worktree.add_subparsers(
        dest="worktree_action", required=True, metavar="ACTION", parser_class=Parser
    )
    rm = command(
        actions,
        parents,
        "rm",
        "Remove a closed agent's worktree (its branch stays).",
        "Prints `removed PATH`, or `already gone: PATH`.",
    )
    rm.add_argument("agent", help="an agent id, or any unique prefix of one")
    rm.add_argument("--force", action="store_true", help="even with uncommitted changes")
    rm.set_defaults(func=remove)


def remove(client: Client, console: Console, args: argparse.Namespace) -> int:
    stub = ws_grpc.WorkspaceServiceStub(client.channel)
    reply = stub.DeleteWorkspace(
        ws_pb.DeleteWorkspaceRequest(agent_id=args.agent, force=args.force),
        timeout=client.timeout_s,
    )
    if console.json:
        console.message(reply)
    elif reply.removed:
        console.line(f"removed {reply.workspace.path} (branch {reply.workspace.branch} kept)")
    else:
        console.line(f"already gone: {reply.workspace.path}")
    return failure.EXIT_OK
