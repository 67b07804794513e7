"""`corral search QUERY`: full-text search over every agent's timeline (SearchTimeline).

Prints each hit (when, which agent, the kind of row, the snippet with its matches between « »)
and the `corral logs` command that shows the timeline from that row on. Needs a daemon with
a state directory (an in-memory one answers UNIMPLEMENTED).

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_cli import failure, filters, ids
from corral_cli.client import Client
from corral_cli.grammar import Parents, Subparsers, command
from corral_cli.render import Console, local_time, one_line

KINDS = (
    "user_message",
    "assistant_message",
    "reasoning",
    "tool_call",
    "todo",
    "error",
    "compaction",
    "subagent_notice",
)
# Rows shown before the hit by the printed `corral logs` command, for context.
_CONTEXT_ROWS = 2


def add_command(sub: Subparsers, parents: Parents) -> None:
    cmd = command(
        sub,
        parents,
        "search",
        "Full-text search over every agent's timeline.",
        "Prints each hit with its snippet and the `corral logs` command that opens it. Needs a\n"
        "daemon with a state directory and the index on (the default; one started with\n"
        "--no-search-index answers FAILED_PRECONDITION, exit 2).",
    )
    cmd.add_argument(
        "query", nargs="+", help='FTS5 syntax: words, "a phrase", prefix*, AND / OR / NOT'
    )
    filters.add_agent_filters(cmd)
    cmd.add_argument(
        "--kind", action="append", default=[], choices=KINDS, help="only rows of this kind"
    )
    filters.add_time_range(cmd, "rows")
    cmd.add_argument("--archived", action="store_true", help="also archived agents")
    cmd.add_argument("--limit", type=int, default=20, metavar="N", help="hits (default 20)")
    cmd.set_defaults(func=search, check=check)


def check(args: argparse.Namespace) -> str:
    if args.limit < 1:
        return "--limit must be at least 1"
    return filters.check_time_range(args)


def search(client: Client, console: Console, args: argparse.Namespace) -> int:
    request = tl_pb.SearchTimelineRequest(
        query=" ".join(args.query),
        agent_ids=[ids.resolve(client, agent) for agent in args.agents],
        label_selector=args.label,
        providers=args.provider,
        item_kinds=args.kind,
        include_archived=args.archived,
    )
    filters.set_time_range(args, request.start_time, request.end_time)
    hits: list[tl_pb.SearchHit] = []
    indexing = False
    while len(hits) < args.limit:
        request.page_size = min(100, args.limit - len(hits))
        reply = client.timeline.SearchTimeline(request, timeout=client.timeout_s)
        hits += reply.hits
        indexing = indexing or reply.indexing
        if not reply.next_page_token:
            break
        request.page_token = reply.next_page_token
    _print(client, console, hits)
    if indexing:
        console.note("note: older rows are still being indexed; some hits may be missing")
    return failure.EXIT_OK


def _print(client: Client, console: Console, hits: list[tl_pb.SearchHit]) -> None:
    if console.json:
        for hit in hits:
            console.message(hit)
        return
    if not hits:
        console.note("no hits")
        return
    heads: dict[str, tuple[str, int]] = {}
    for hit in hits:
        if hit.agent_id not in heads:
            timeline = client.agents.GetAgent(
                agent_pb.GetAgentRequest(agent_id=hit.agent_id), timeout=client.timeout_s
            ).agent.timeline
            heads[hit.agent_id] = (timeline.epoch, timeline.next_seq)
        when = local_time(hit.timestamp)
        console.line(f"{when}  {hit.agent_id[:12]}  #{hit.cursor.seq} {hit.item_kind}")
        console.line(f"    {one_line(hit.snippet)}")
        console.line(f"    {_open_command(hit, *heads[hit.agent_id])}")


def _open_command(hit: tl_pb.SearchHit, epoch: str, next_seq: int) -> str:
    if hit.cursor.epoch != epoch:
        return f"(rewound since: corral logs {hit.agent_id} shows the current timeline)"
    rows = next_seq - hit.cursor.seq + _CONTEXT_ROWS
    return f"corral logs {hit.agent_id} --limit {rows}"
