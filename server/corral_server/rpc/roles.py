"""What a token's role lets a call do. A `full` token may make every call; a `read` token only
the calls that read: list, get, fetch (tool outputs too), subscribe, search, export, the
working tree's changes, the schedules, and Heartbeat (a watcher's presence). Everything else
(create, prompt, cancel, answer a permission, update, close, archive, import, spawn, wait)
answers PERMISSION_DENIED / READ_ONLY_TOKEN, on gRPC and on the
web port alike, before the request is decoded. Health needs no token; reflection only lists
the schema and is a read.

The caller's role is also kept for the call's task (`CALLER_ROLE`), so GetServerInfo can tell
a client (the dashboard) what its token may do.
"""

from __future__ import annotations

from contextvars import ContextVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral_server.rpc.auth import READ
from corral_server.rpc.errors import ERROR_DOMAIN

READ_ONLY_TOKEN = "READ_ONLY_TOKEN"

_READS = {
    "AgentService": ("GetAgent", "ListAgents", "ListProviders", "GetUsage", "ExportAgent"),
    "TurnService": ("GetQueuedPrompt", "GetPendingPermission"),
    "TimelineService": ("FetchTimeline", "GetActivity", "SearchTimeline", "FetchToolOutput"),
    "EventService": ("Subscribe", "Heartbeat"),
    "SubagentService": ("ListSubagentRuns",),
    "ServerService": ("GetServerInfo",),
    "ScheduleService": ("ListSchedules",),
    "WorkspaceService": ("GetChanges",),
}
READ_METHODS = frozenset(
    f"/corral.v1.{service}/{method}" for service, methods in _READS.items() for method in methods
)
_READ_PREFIXES = ("/grpc.reflection.",)

# The role of the token the running call came with ("" when the daemon takes no tokens).
CALLER_ROLE: ContextVar[str] = ContextVar("caller_role", default="")


def permits(role: str, method: str) -> bool:
    """Whether a token of `role` may call `method` (a path: /package.Service/Method)."""
    return role != READ or method in READ_METHODS or method.startswith(_READ_PREFIXES)


def denied(method: str) -> grpc.Status:
    """PERMISSION_DENIED / READ_ONLY_TOKEN for `method`."""
    name = method.rpartition("/")[2]
    info = any_pb2.Any()
    info.Pack(
        error_details_pb2.ErrorInfo(
            reason=READ_ONLY_TOKEN, domain=ERROR_DOMAIN, metadata={"method": name[:64]}
        )
    )
    status = status_pb2.Status(
        code=code_pb2.PERMISSION_DENIED,
        message=f"a read-only token may not call {name[:64]} (it lists, gets, fetches, "
        "subscribes, searches and exports); use a full token",
        details=[info],
    )
    return rpc_status.to_status(status)
