"""`corral providers`: ListProviders as a table (or `--json` lines): each provider's name,
kind, whether it can run (and why not), its modes and models, and whether it takes steered
prompts into a running turn.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.render import Console, one_line


def providers(client: Client, console: Console, args: argparse.Namespace) -> int:
    """ListProviders; exit 0 whatever their availability (it is the answer, not a failure)."""
    listed = client.agents.ListProviders(
        agent_pb.ListProvidersRequest(), timeout=client.timeout_s
    ).providers
    if console.json:
        for provider in listed:
            console.message(provider)
    else:
        for line in provider_table(listed):
            console.line(line)
    return failure.EXIT_OK


def provider_table(providers: Sequence[agent_pb.Provider]) -> list[str]:
    header = ("NAME", "KIND", "AVAILABLE", "MODES", "MODELS", "STEER")
    rows = [
        (
            p.name,
            p.kind,
            "yes" if p.available else f"no: {one_line(p.unavailable_reason) or 'unavailable'}",
            ",".join(m.id for m in p.modes) or "-",
            ",".join(m.id for m in p.models) or "-",
            "yes" if p.can_steer else "no",
        )
        for p in providers
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
