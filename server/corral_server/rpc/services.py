"""The corral.v1 service implementations of one daemon, by service name: the gRPC server
(rpc/server.py) and the web port (web/) serve these very objects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from corral_server.clock import Clock
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.rpc.agent_service import AgentService
from corral_server.rpc.event_service import EventServicer
from corral_server.rpc.server import service_descriptor
from corral_server.rpc.server_service import ServerService
from corral_server.rpc.streams import StreamBook
from corral_server.rpc.subagent_service import SubagentService
from corral_server.rpc.timeline_service import TimelineService
from corral_server.rpc.turn_service import TurnService
from corral_server.server_info import ServerInfo
from corral_server.store.search import SearchIndex
from corral_server.subagents.registry import SubagentRegistry


def build_servicers(
    *,
    manager: AgentManager,
    hub: EventHub,
    subagents: SubagentRegistry,
    streams: StreamBook,
    search: SearchIndex | None,
    server_info: Callable[[], ServerInfo],
    clock: Clock,
) -> dict[str, Any]:
    return {
        "AgentService": AgentService(manager),
        "TurnService": TurnService(manager, hub, streams),
        "TimelineService": TimelineService(manager, search),
        "SubagentService": SubagentService(subagents),
        "ServerService": ServerService(server_info),
        "EventService": EventServicer(
            hub,
            manager.snapshot,
            max_id_chars=manager.limits.max_id_chars,
            presence=manager.presence,
            clock=clock,
            streams=streams,
            fetch_timeline=manager.fetch_timeline,
        ),
    }


def by_descriptor(servicers: Mapping[str, Any]) -> dict[Any, Any]:
    """The same servicers keyed by their service's protobuf descriptor (what web/ takes)."""
    return {service_descriptor(name): servicer for name, servicer in servicers.items()}
