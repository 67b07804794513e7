"""The daemon's gRPC server: the services it serves, its interceptors and channel options, and
binding it to `--listen` (a TCP address or a private unix socket).

The serving daemon (app.py) and a standby's waiting server (standby.py) bind the same way and
follow the same socket rules. Must not: open the store or start agents (app.py does).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import agent_service_pb2_grpc as agent_svc_grpc
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import schedule_service_pb2 as sched_svc_pb
from corral.v1 import schedule_service_pb2_grpc as sched_svc_grpc
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import subagent_service_pb2_grpc as sub_svc_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc
from corral.v1 import workspace_service_pb2 as ws_pb
from corral.v1 import workspace_service_pb2_grpc as ws_grpc
from corral_server.listen import (
    make_socket_private,
    remove_socket,
    socket_dir_problem,
    socket_in_use,
    unix_path,
)
from corral_server.reclaim import Reclaimer
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.bearer import BearerTokens
from corral_server.rpc.connections import ConnectionBook, ConnectionLimit
from corral_server.rpc.error_counts import ErrorCounts
from corral_server.rpc.errors import install_client_gone
from corral_server.rpc.malformed import MalformedRequests

if TYPE_CHECKING:
    from corral_server.rpc.forwarding import ForwardCalls

_SERVICE_FILES = {
    "AgentService": agent_svc_pb,
    "TurnService": turn_pb,
    "TimelineService": tl_pb,
    "EventService": event_pb,
    "SubagentService": sub_svc_pb,
    "ServerService": server_pb,
    "WorkspaceService": ws_pb,
    "ScheduleService": sched_svc_pb,
}


def service_descriptor(name: str) -> Any:
    """The protobuf descriptor of the corral.v1 service `name` (e.g. "AgentService")."""
    return _SERVICE_FILES[name].DESCRIPTOR.services_by_name[name]


# The full names of the corral.v1 services, for health and reflection.
SERVICE_NAMES = tuple(service_descriptor(name).full_name for name in _SERVICE_FILES)


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    """The server's health ("") and every corral service's: SERVING or NOT_SERVING (after
    the drain's `enter_graceful_shutdown` the servicer ignores it)."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, status)


def build_server(
    *,
    tokens: TokenFile | None,
    connections: ConnectionBook,
    rpc_errors: Counter[str],
    reclaimer: Reclaimer,
    max_request_bytes: int,
    max_streams_per_connection: int,
    max_connections: int,
    forward: ForwardCalls | None = None,
) -> grpc.aio.Server:
    """The daemon's server, not yet bound, with no services added. With `forward`, calls
    that change an agent another node owns go to that node (rpc/forwarding.py)."""
    install_client_gone()
    # The token check runs first: a refused call's body is never decoded.
    auth = [BearerTokens(tokens)] if tokens is not None else []
    return grpc.aio.server(
        interceptors=[
            ErrorCounts(rpc_errors),  # outermost: sees how every call ended
            *auth,
            ConnectionLimit(connections),
            MalformedRequests(reclaimer),
            # Innermost: after the token check (the receiving node authenticates first), and
            # it sees only requests that decoded.
            *([forward] if forward is not None else []),
        ],
        options=[
            # A second daemon on the same port must fail to bind, not share the port.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.max_concurrent_streams", max_streams_per_connection),
            # Past this, grpc closes a new connection at once ("Socket closed"): idle
            # connections cannot grow without bound either (ConnectionLimit refuses calls
            # on more than max_connections clearly, well before).
            ("grpc.max_allowed_incoming_connections", 2 * max_connections),
            # A client that reads nothing at all, not even pings, is cut after 80 s: its
            # connection and what its streams hold go away with it.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            # A proxy in front (Envoy pings every upstream connection every 10 s) may ping a
            # connection whose streams are quiet: under gRPC's default (one such ping per five
            # minutes) the third ends the connection with GOAWAY "too many pings", and every
            # call it carried with it. One a second, with or without calls, is allowed.
            ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
    )


def add_services(
    server: grpc.aio.Server,
    servicers: Mapping[str, Any],
    health_servicer: Any,
    with_reflection: bool,
) -> None:
    """Every corral.v1 service (by service name, as `services.build_servicers` gives them),
    health, and reflection when asked for."""
    agent_svc_grpc.add_AgentServiceServicer_to_server(servicers["AgentService"], server)
    turn_grpc.add_TurnServiceServicer_to_server(servicers["TurnService"], server)
    tl_grpc.add_TimelineServiceServicer_to_server(servicers["TimelineService"], server)
    sub_svc_grpc.add_SubagentServiceServicer_to_server(servicers["SubagentService"], server)
    server_grpc.add_ServerServiceServicer_to_server(servicers["ServerService"], server)
    ws_grpc.add_WorkspaceServiceServicer_to_server(servicers["WorkspaceService"], server)
    sched_svc_grpc.add_ScheduleServiceServicer_to_server(servicers["ScheduleService"], server)
    server.add_generic_rpc_handlers((servicers["EventService"].handler(),))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if with_reflection:
        enable_reflection(server, SERVICE_NAMES)


def enable_reflection(server: grpc.aio.Server, services: tuple[str, ...]) -> None:
    reflection.enable_server_reflection(
        (*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )


async def check_socket(listen: str, path: Path) -> str:
    """OSError when the socket's directory could let another user replace it, or when
    another server answers there (grpc would unlink its socket and take the path); else a
    warning to log ("" for none)."""
    refusal, warning = socket_dir_problem(path)
    if refusal:
        raise OSError(f"cannot listen on {listen}: {refusal}")
    if await asyncio.to_thread(socket_in_use, path):
        raise OSError(f"cannot listen on {listen}: a server answers there")
    return warning


def bind(server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None) -> int:
    """Bind `server` to `listen` (TLS with `credentials`); the bound port. OSError (one line)
    when it cannot listen there."""
    try:
        if credentials is not None:
            port = server.add_secure_port(listen, credentials)
        else:
            port = server.add_insecure_port(listen)
    except RuntimeError as exc:  # grpc's "Failed to bind"
        raise OSError(f"cannot listen on {listen}: {exc}") from exc
    if port == 0:
        raise OSError(f"cannot listen on {listen}: address in use or invalid")
    return port


@dataclass
class Listening:
    """A server bound to its `--listen` address and serving. With unix:PATH, `socket` is the
    socket's path and inode (removed at the stop if it is still ours) and `warning` what its
    directory's check had to say ("" for nothing)."""

    server: grpc.aio.Server
    port: int
    socket: tuple[Path, int] | None = None
    warning: str = ""

    async def stop(self, grace_s: float | None = 0) -> None:
        await self.server.stop(grace_s)
        if self.socket is not None:  # a daemon that takes over binds its own
            remove_socket(*self.socket)


async def listen_on(
    server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None
) -> Listening:
    """Check a unix socket's path (`check_socket`), bind `server` (`bind`) and start it.
    OSError (one line) when it cannot listen there."""
    socket_path = unix_path(listen)
    warning = "" if socket_path is None else await check_socket(listen, socket_path)
    port = bind(server, listen, credentials)
    # Bound, not yet accepting: the socket is 0600 before anyone can connect.
    socket = None if socket_path is None else (socket_path, make_socket_private(socket_path))
    await server.start()
    return Listening(server, port, socket, warning)
