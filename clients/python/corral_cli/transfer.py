"""`corral export AGENT` and `corral import FILE`: an agent's timeline to a file (ExportAgent:
JSON Lines, lossless, or Markdown) and such a JSON Lines file back as a new agent
(ImportAgentExport), in chunks both ways. `corral import PROVIDER SESSION_ID` (two arguments)
stays the import of a provider's session (commands.py).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

from corral.v1 import agent_service_pb2 as svc_pb
from corral_cli import commands, failure, ids
from corral_cli.client import Client
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console, state_label

FORMATS = {"jsonl": svc_pb.EXPORT_FORMAT_JSONL, "markdown": svc_pb.EXPORT_FORMAT_MARKDOWN}
# Bytes per ImportAgentExport message: under the daemon's 3 MiB a message.
CHUNK_BYTES = 1 << 20


def add_export(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "export",
        "Write AGENT's header and timeline to a file (or stdout).",
        "jsonl (the default) is lossless: `corral import FILE` makes a new agent of it.\n"
        "markdown is for people. Rows appended while it runs are left for the next export.",
    )
    cmd.add_argument("agent", help="an agent id, or any unique prefix of one")
    cmd.add_argument(
        "--format", choices=tuple(FORMATS), default="jsonl", help="jsonl (default) or markdown"
    )
    cmd.add_argument("-o", "--output", default="-", metavar="FILE", help="default: stdout")
    cmd.set_defaults(func=export)


def add_import(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "import",
        "Make a new agent of an export file, or of an existing provider session.",
        "corral import FILE (- = stdin): a `corral export` JSON Lines file; its rows become the\n"
        "new agent's history (a bad or cut file is refused, naming the line, and creates\n"
        "nothing). corral import PROVIDER SESSION_ID: the session's conversation as history.\n"
        "Prints the new agent's id and how many rows it holds.",
    )
    cmd.add_argument("source", metavar="FILE|PROVIDER", help="an export file, or a provider")
    cmd.add_argument("session_id", nargs="?", metavar="SESSION_ID", help="the provider's session")
    cmd.add_argument("--cwd", default=None, help="working directory (default: the file's, or here)")
    cmd.add_argument("--provider", default="", help="FILE: another provider than the file's")
    cmd.set_defaults(func=import_any)


def export(client: Client, console: Console, args: argparse.Namespace) -> int:
    request = svc_pb.ExportAgentRequest(
        agent_id=ids.resolve(client, args.agent), format=FORMATS[args.format]
    )
    out: BinaryIO = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    try:
        for chunk in client.agents.ExportAgent(request, timeout=None):
            out.write(chunk.data)
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    return failure.EXIT_OK


def import_any(client: Client, console: Console, args: argparse.Namespace) -> int:
    if args.session_id:
        args.provider = args.source
        return commands.import_agent(client, console, args)
    source: BinaryIO = sys.stdin.buffer if args.source == "-" else open(args.source, "rb")  # noqa: SIM115
    with source:
        cwd = os.path.abspath(args.cwd) if args.cwd else ""
        reply = client.agents.ImportAgentExport(_chunks(source, cwd, args.provider), timeout=None)
    if console.json:
        console.message(reply)
    else:
        agent = reply.agent
        console.line(
            f"{agent.id} imported: {agent.provider}, {reply.rows} rows, {state_label(agent)}"
        )
    return failure.EXIT_OK


def _chunks(source: BinaryIO, cwd: str, provider: str) -> Iterator[svc_pb.ImportAgentExportRequest]:
    first = True
    while data := source.read(CHUNK_BYTES):
        if first:
            yield svc_pb.ImportAgentExportRequest(data=data, cwd=cwd, provider=provider)
            first = False
        else:
            yield svc_pb.ImportAgentExportRequest(data=data)
    if first:  # an empty file: the daemon says so
        yield svc_pb.ImportAgentExportRequest(cwd=cwd, provider=provider)
