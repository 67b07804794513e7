"""`corral output AGENT BLOB_ID`: a tool call's whole output, kept apart from its row because
it was too big for it (ToolCall.output_ref; `corral logs` prints the command), streamed to
stdout chunk by chunk (FetchToolOutput), byte for byte: `corral output A B > file`.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
from typing import BinaryIO

from corral.v1 import timeline_service_pb2 as tl_pb
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console

# Bytes asked per call: the daemon's most (more is answered with this), under 4 MiB.
CHUNK_BYTES = 3 * 1024 * 1024


def add_command(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "output",
        "Print a tool call's whole output that was kept apart from its row.",
        "BLOB_ID is the id `corral logs` prints after a tool call's preview. The bytes go to\n"
        "stdout unchanged; NOT_FOUND (exit 2) once the row is rewound or no longer retained.",
    )
    cmd.add_argument("agent", help="an agent id, or any unique prefix of one")
    cmd.add_argument("blob_id", help="the output's id (ToolCall.output_ref.blob_id)")
    cmd.set_defaults(func=output)


def output(client: Client, console: Console, args: argparse.Namespace) -> int:
    binary: BinaryIO | None = getattr(console.out, "buffer", None)
    offset = 0
    while True:
        chunk = client.timeline.FetchToolOutput(
            tl_pb.FetchToolOutputRequest(
                agent_id=args.agent, blob_id=args.blob_id, offset=offset, limit=CHUNK_BYTES
            ),
            timeout=client.timeout_s,
        )
        if binary is not None:
            binary.write(chunk.data)
        else:  # a text stream without bytes under it (a caller's capture)
            console.out.write(chunk.data.decode("utf-8", "replace"))
        offset += len(chunk.data)
        if offset >= chunk.size_bytes or not chunk.data:
            break
    if binary is not None:
        binary.flush()
    return failure.EXIT_OK
