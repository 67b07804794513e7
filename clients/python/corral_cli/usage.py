"""`corral usage`: token usage and cost of completed turns (GetUsage), added up and grouped.

Prints one line per group (what it is grouped by, turns, input, output and cached tokens,
cost), then the total; with --json, the GetUsage answers as they come.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral_cli import failure, filters, ids
from corral_cli.client import Client
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console

GROUPS = {
    "agent": svc_pb.USAGE_GROUP_BY_AGENT,
    "provider": svc_pb.USAGE_GROUP_BY_PROVIDER,
    "model": svc_pb.USAGE_GROUP_BY_MODEL,
    "day": svc_pb.USAGE_GROUP_BY_DAY,
}
# The order of the columns, whatever the order of --by.
_COLUMNS = ("day", "provider", "model", "agent")


def add_command(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "usage",
        "Token usage and cost of completed turns, added up.",
        "Counts what providers reported for each completed turn (cost only when the provider\n"
        "reports one). --by groups the totals (e.g. --by provider,model or --by day); days are\n"
        "UTC. Archived agents count too.",
    )
    cmd.add_argument(
        "--by",
        default="",
        metavar="KEYS",
        help="group by these, comma-separated: agent, provider, model, day",
    )
    filters.add_agent_filters(cmd)
    filters.add_time_range(cmd, "turns ended")
    cmd.set_defaults(func=usage, check=check)


def _keys(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]


def check(args: argparse.Namespace) -> str:
    for key in _keys(args.by):
        if key not in GROUPS:
            return f"--by: unknown key {key!r} (agent, provider, model, day)"
    return filters.check_time_range(args)


def usage(client: Client, console: Console, args: argparse.Namespace) -> int:
    keys = _keys(args.by)
    request = svc_pb.GetUsageRequest(
        agent_ids=[ids.resolve(client, agent) for agent in args.agents],
        label_selector=args.label,
        providers=args.provider,
        group_by=[GROUPS[key] for key in keys],
        page_size=1000,
    )
    filters.set_time_range(args, request.start_time, request.end_time)
    groups: list[svc_pb.UsageGroup] = []
    while True:
        reply = client.agents.GetUsage(request, timeout=client.timeout_s)
        if console.json:
            console.message(reply)
        groups += reply.groups
        if not reply.next_page_token:
            break
        request.page_token = reply.next_page_token
    if not console.json:
        _print(console, [c for c in _COLUMNS if c in keys], groups, reply)
    return failure.EXIT_OK


def _print(
    console: Console,
    columns: list[str],
    groups: list[svc_pb.UsageGroup],
    reply: svc_pb.GetUsageResponse,
) -> None:
    header = [*columns, "turns", "input", "output", "cached", "cost_usd"]
    rows = [[*(_cell(g, c) for c in columns), *_numbers(g.usage, g.turns)] for g in groups]
    if columns:
        blank = [""] * (len(columns) - 1)
        rows.append(["total", *blank, *_numbers(reply.total, reply.turns)])
    else:
        rows = [_numbers(reply.total, reply.turns)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            cell.ljust(w) if i < len(columns) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        console.line("  ".join(cells).rstrip())


def _cell(group: svc_pb.UsageGroup, column: str) -> str:
    if column == "agent":
        return group.agent_id
    if column == "model":
        return group.model or "(default)"
    return str(getattr(group, column))


def _numbers(total: agent_pb.Usage, turns: int) -> list[str]:
    return [
        str(turns),
        str(total.input_tokens),
        str(total.output_tokens),
        str(total.cached_input_tokens),
        f"{total.cost_usd:.4f}",
    ]
