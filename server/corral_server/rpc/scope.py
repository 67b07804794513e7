"""Which agents and times a cross-agent read covers (SearchTimeline, GetUsage): the agents
resolved in memory from the manager's snapshots, by label selector, agent ids and providers;
the half-open range [start_time, end_time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from corral_server import errors
from corral_server.manager.manager import AgentManager
from corral_server.manager.selector import parse_selector
from corral_server.rpc.items import timestamp_ms


class _TimeRanged(Protocol):
    @property
    def start_time(self) -> Timestamp: ...
    @property
    def end_time(self) -> Timestamp: ...
    def HasField(self, field_name: Any) -> bool: ...


def time_range(request: _TimeRanged) -> tuple[int | None, int | None]:
    """(start, end) in ms (None: unbounded); INVALID_ARGUMENT unless end is after start."""
    start = timestamp_ms(request.start_time) if request.HasField("start_time") else None
    end = timestamp_ms(request.end_time) if request.HasField("end_time") else None
    if start is not None and end is not None and end <= start:
        raise errors.InvalidArgument.field("end_time", "must be after start_time")
    return start, end


def agents_in_scope(
    manager: AgentManager,
    *,
    label_selector: str,
    agent_ids: Sequence[str],
    providers: Sequence[str],
    include_archived: bool,
) -> frozenset[str] | None:
    """The ids of the agents that match the selector and, when any are given, are among
    `agent_ids` and of `providers`; archived ones only with `include_archived`. None = every
    agent (nothing narrows the read). An unknown id in `agent_ids` is NOT_FOUND."""
    selector = parse_selector(label_selector)
    for agent_id in agent_ids:
        manager.get(agent_id)  # NOT_FOUND for an unknown agent, as everywhere
    if include_archived and not label_selector.strip() and not agent_ids and not providers:
        return None
    wanted_ids = frozenset(agent_ids)
    wanted_providers = frozenset(providers)
    return frozenset(
        agent.id
        for agent in manager.directory.agents()
        if (include_archived or agent.archived_at_ms is None)
        and (not wanted_ids or agent.id in wanted_ids)
        and (not wanted_providers or agent.provider in wanted_providers)
        and selector.matches(agent.labels)
    )
