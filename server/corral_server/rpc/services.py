"""The corral.v1 service implementations of one daemon, by service name: the gRPC server
(rpc/server.py) and the web port (web/) serve these very objects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from corral_server.clock import Clock
from corral_server.hub import EventHub
from corral_server.manager.manager import AgentManager
from corral_server.rpc.agent_service import AgentService, ReloadOn
from corral_server.rpc.event_service import EventServicer
from corral_server.rpc.schedule_service import ScheduleService
from corral_server.rpc.server import service_descriptor
from corral_server.rpc.server_service import ServerService
from corral_server.rpc.streams import StreamBook
from corral_server.rpc.subagent_service import SubagentService
from corral_server.rpc.timeline_service import TimelineService
from corral_server.rpc.turn_service import TurnService
from corral_server.rpc.workspace_service import WorkspaceService
from corral_server.schedules.scheduler import Scheduler
from corral_server.server_info import ServerInfo
from corral_server.store.search import SearchIndex
from corral_server.subagents.registry import SubagentRegistry
from corral_server.workspace.changes import Changes
from corral_server.workspace.worktrees import Worktrees

# A cluster node behind a client's resume point waits this long to apply it, then resets.
CLUSTER_RESUME_WAIT_S = 5.0


def build_servicers(
    *,
    manager: AgentManager,
    hub: EventHub,
    subagents: SubagentRegistry,
    streams: StreamBook,
    search: SearchIndex | None,
    server_info: Callable[[], ServerInfo],
    clock: Clock,
    worktrees: Worktrees,
    changes: Changes,
    scheduler: Scheduler,
    resume_wait_s: float = 0.0,
    reload_on: ReloadOn | None = None,
) -> dict[str, Any]:
    return {
        "AgentService": AgentService(manager, worktrees, reload_on),
        "TurnService": TurnService(manager, hub, streams),
        "TimelineService": TimelineService(manager, search),
        "SubagentService": SubagentService(subagents),
        "ServerService": ServerService(server_info),
        "WorkspaceService": WorkspaceService(manager, worktrees, changes),
        "ScheduleService": ScheduleService(scheduler, manager, clock),
        "EventService": EventServicer(
            hub,
            manager.directory.snapshot,
            max_id_chars=manager.limits.max_id_chars,
            presence=manager.presence,
            clock=clock,
            streams=streams,
            fetch_timeline=manager.reads.fetch_timeline,
            resume_wait_s=resume_wait_s,
        ),
    }


def by_descriptor(servicers: Mapping[str, Any]) -> dict[Any, Any]:
    """The same servicers keyed by their service's protobuf descriptor (what web/ takes)."""
    return {service_descriptor(name): servicer for name, servicer in servicers.items()}
