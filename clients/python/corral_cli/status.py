"""`corral status`: is the daemon at --addr serving, draining, on standby, or not reachable, how
many agents it holds in each state, and what it says about itself (GetServerInfo: its version,
event log, limits, providers and features).

Health says whether it answers at all; GetServerInfo says its state. A daemon without
GetServerInfo (or one refusing it) is told apart by ListAgents, which a standby answers
UNAVAILABLE / STANDBY and a daemon past its drain delay UNAVAILABLE / SHUTTING_DOWN.

Must not: print failures of the RPCs as errors: an absent daemon is this command's answer.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import grpc
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli import failure, server_info
from corral_cli.client import Client
from corral_cli.grammar import version
from corral_cli.health import health_stub
from corral_cli.render import Console, state_name

_PAGE_SIZE = 1000


def status(client: Client, console: Console, args: argparse.Namespace) -> int:
    state, detail = _serving(client)
    info = server_info.ask(client) if state != "not reachable" else None
    if info is not None:
        state = server_info.STATE_NAMES.get(info.state, state)
    counts: Counter[str] = Counter()
    if state in ("serving", "draining"):
        try:
            counts = _agents_by_state(client)
        except grpc.RpcError as exc:
            failed = failure.decode(exc)
            if failed.reason == "STANDBY":
                state = "standby"
            detail = detail or f"{failed.code.name}: {failed.message}"
    if console.json:
        answer: dict[str, object] = {"addr": client.addr, "state": state, "cli_version": version()}
        answer |= {"agents": dict(sorted(counts.items()))} if counts or state == "serving" else {}
        answer |= {"server": server_info.as_dict(info)} if info is not None else {}
        console.line(json.dumps(answer | ({"detail": detail} if detail else {})))
    else:
        console.line(f"{client.addr}: {state}{f' ({detail})' if detail else ''}")
        if state in ("serving", "draining"):
            console.line(f"agents: {_counts_text(counts)}")
        for line in server_info.describe(info) if info is not None else ():
            console.line(line)
        console.line(f"cli: corral {version()}")
    return failure.EXIT_FAILED if state == "not reachable" else failure.EXIT_OK


def _serving(client: Client) -> tuple[str, str]:
    """serving / draining (NOT_SERVING: a drain, or a standby, told apart by ListAgents) /
    not reachable, and why when it is not serving."""
    try:
        reply = health_stub(client.channel).Check(
            health_pb2.HealthCheckRequest(), timeout=client.timeout_s
        )
    except grpc.RpcError as exc:
        failed = failure.decode(exc)
        return "not reachable", f"{failed.code.name}: {failed.message}"
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return "serving", ""
    return "draining", "health NOT_SERVING"


def _agents_by_state(client: Client) -> Counter[str]:
    """Agents by lifecycle state; archived ones counted apart, as `archived`."""
    request = agent_pb.ListAgentsRequest(page_size=_PAGE_SIZE, include_archived=True)
    counts: Counter[str] = Counter()
    while True:
        page = client.agents.ListAgents(request, timeout=client.timeout_s)
        for agent in page.agents:
            archived = agent.HasField("archived_at")
            counts["archived" if archived else state_name(agent)] += 1
        if not page.next_page_token:
            return counts
        request.page_token = page.next_page_token


def _counts_text(counts: Counter[str]) -> str:
    """`3 (1 running, 2 idle, 1 archived)`: the live agents, then each state; or `none`."""
    live = {state: n for state, n in counts.items() if state != "archived"}
    parts = [f"{n} {state}" for state, n in sorted(live.items())]
    if counts["archived"]:
        parts.append(f"{counts['archived']} archived")
    return f"{sum(live.values())} ({', '.join(parts)})" if parts else "none"
