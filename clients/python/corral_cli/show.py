"""`corral show AGENT`: one agent in full, where `ls` has one cut line: lifecycle, attention,
pending permissions, queued prompts, usage, labels, parent and children, timeline head, times.

Must not: print failures of the RPC itself (main.py does, in one place).
"""

from __future__ import annotations

import argparse

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import agent_service_pb2 as agent_pb
from corral_cli import failure
from corral_cli.client import Client
from corral_cli.render import (
    Console,
    local_time,
    one_line,
    queued_line,
    state_label,
    state_name,
)

_PAGE_SIZE = 1000


def show(client: Client, console: Console, args: argparse.Namespace) -> int:
    agent = client.agents.GetAgent(
        agent_pb.GetAgentRequest(agent_id=args.agent), timeout=client.timeout_s
    ).agent
    children = _children(client, agent.id)
    if console.json:
        console.message(agent)
        return failure.EXIT_OK
    for name, value in describe(agent, children):
        console.line(f"{name:<12}{value}".rstrip())
    return failure.EXIT_OK


def _children(client: Client, agent_id: str) -> list[agent_types_pb.Agent]:
    request = agent_pb.ListAgentsRequest(
        page_size=_PAGE_SIZE, parent_agent_id=agent_id, include_archived=True
    )
    children: list[agent_types_pb.Agent] = []
    while True:
        page = client.agents.ListAgents(request, timeout=client.timeout_s)
        children.extend(page.agents)
        if not page.next_page_token:
            return children
        request.page_token = page.next_page_token


# Where a title came from, when not from a person (who knows where theirs came from).
_TITLE_FROM = {
    agent_types_pb.TITLE_SOURCE_PROMPT: " (from the first prompt)",
    agent_types_pb.TITLE_SOURCE_PROVIDER: " (from the provider)",
}


def _title(agent: agent_types_pb.Agent) -> str:
    if not agent.title:
        return "-"
    return one_line(agent.title) + _TITLE_FROM.get(agent.title_source, "")


def describe(
    agent: agent_types_pb.Agent, children: list[agent_types_pb.Agent]
) -> list[tuple[str, str]]:
    """(name, value) lines; a list's items follow its name line, indented."""
    lines = [
        ("agent", agent.id),
        ("provider", f"{agent.provider} (session {agent.provider_session_id or '-'})"),
        ("cwd", agent.cwd),
        ("model", agent.model or "-"),
        ("mode", agent.mode or "-"),
        ("title", _title(agent)),
        ("state", _lifecycle(agent)),
        ("attention", _attention(agent.attention)),
    ]
    lines += _listed("permissions", [_permission(agent.id, p) for p in agent.pending_permissions])
    lines += _listed("queued", [queued_line(q) for q in agent.queued_prompts])
    usage = agent.last_usage
    lines.append(
        (
            "usage",
            f"last turn: {usage.input_tokens} in, {usage.output_tokens} out, "
            f"{usage.cached_input_tokens} cached, ${usage.cost_usd:.4f}"
            if agent.HasField("last_usage")
            else "-",
        )
    )
    total = agent.usage_total
    lines.append(
        (
            "",
            f"all turns: {total.input_tokens} in, {total.output_tokens} out, "
            f"{total.cached_input_tokens} cached, ${total.cost_usd:.4f}",
        )
    )
    labels = ", ".join(f"{k}={v}" for k, v in sorted(agent.labels.items()))
    lines.append(("labels", labels or "-"))
    lines.append(("parent", agent.parent_agent_id or "-"))
    lines += _listed("children", [f"{c.id}  {_short_state(c)}" for c in children])
    kept = max(0, agent.timeline.next_seq - 1)
    lines.append(("timeline", f"epoch {agent.timeline.epoch}, next seq {agent.timeline.next_seq}"))
    lines.append(("", f"({kept} row{'' if kept == 1 else 's'} appended in this epoch)"))
    if agent.HasField("last_error"):
        code = f" ({agent.last_error.code})" if agent.last_error.code else ""
        lines.append(("last error", f"{one_line(agent.last_error.message)}{code}"))
    lines.append(("created", local_time(agent.created_at)))
    lines.append(("updated", local_time(agent.updated_at)))
    return lines


def _listed(name: str, items: list[str]) -> list[tuple[str, str]]:
    if not items:
        return [(name, "none")]
    return [(name, f"{len(items)}"), *(("", f"  {item}") for item in items)]


def _lifecycle(agent: agent_types_pb.Agent) -> str:
    label = state_label(agent)
    if agent.lifecycle.HasField("closed"):
        label = f"closed at {local_time(agent.lifecycle.closed.closed_at)}"
    if agent.HasField("archived_at"):
        label += f"; archived at {local_time(agent.archived_at)}"
    return label


def _short_state(agent: agent_types_pb.Agent) -> str:
    return "archived" if agent.HasField("archived_at") else state_name(agent)


def _attention(attention: agent_types_pb.Attention) -> str:
    if not attention.required:
        return "none"
    reason = agent_types_pb.AttentionReason.Name(attention.reason)
    return f"{reason.removeprefix('ATTENTION_REASON_').lower()} at {local_time(attention.at)}"


def _permission(agent_id: str, permission: agent_types_pb.PendingPermission) -> str:
    title = f" {one_line(permission.title)}" if permission.title else ""
    return (
        f"{permission.id}  {permission.name}{title} (turn {permission.turn_id or '-'}); "
        f"answer: corral permit {agent_id} [--deny] {permission.id}"
    )
