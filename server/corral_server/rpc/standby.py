"""A hot standby's waiting server (`corral serve --standby`): while another daemon holds the state
directory, the standby listens on its address so a load balancer sees it, answers health
NOT_SERVING for "" and every service, and UNAVAILABLE with reason STANDBY to every call of
the agent services. Reflection (when on) and ServerService answer, so a person can ask it with
grpcurl what it is; with tokens, everything but health needs one, as on the daemon. It never
touches the state directory; the real daemon replaces it once the lock is free.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_server import errors
from corral_server.listen import make_socket_private, remove_socket, unix_path
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.bearer import BearerTokens
from corral_server.rpc.errors import install_client_gone, to_status
from corral_server.rpc.server import bind, check_socket, enable_reflection
from corral_server.rpc.server_service import SERVICE_NAME, ServerService
from corral_server.server_info import ServerInfo

HEALTH_PREFIX = "/grpc.health.v1.Health/"
# What a standby answers; reflection's v1 and v1alpha services share the prefix.
ANSWERED_PREFIXES = (HEALTH_PREFIX, "/grpc.reflection.", f"/{SERVICE_NAME}/")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def _identity(data: bytes) -> bytes:
    return data


async def _refuse(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    status = to_status(errors.Standby())
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: context.abort raises")


class _RefuseAgentCalls(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Req, Resp] | None]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        if details.method.startswith(ANSWERED_PREFIXES):
            return await continuation(details)
        # Raw bytes in whatever the method's types: the refusal never decodes nor answers.
        refusal: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
            _refuse, request_deserializer=_identity, response_serializer=_identity
        )
        return refusal


@dataclass
class StandbyServer:
    server: grpc.aio.Server
    port: int
    socket: tuple[Path, int] | None  # with unix:PATH, the socket's path and inode

    async def stop(self) -> None:
        await self.server.stop(0)
        if self.socket is not None:  # the daemon that takes over binds its own
            remove_socket(*self.socket)


async def start_standby_server(
    listen: str,
    services: tuple[str, ...],
    credentials: grpc.ServerCredentials | None,
    *,
    info: ServerInfo,
    tokens: TokenFile | None = None,
    reflection: bool = False,
) -> StandbyServer:
    """The waiting server, bound and serving. `info` is what GetServerInfo answers (state
    STANDBY); `services` are the daemon's, for health and reflection. OSError (one line)
    when it cannot listen."""
    socket_path = unix_path(listen)
    if socket_path is not None:  # the directory's warning is the daemon's, once it serves
        await check_socket(listen, socket_path)
    install_client_gone()
    auth = [BearerTokens(tokens)] if tokens is not None else []
    server = grpc.aio.server(interceptors=[*auth, _RefuseAgentCalls()])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server_grpc.add_ServerServiceServicer_to_server(ServerService(lambda: info), server)
    if reflection:
        enable_reflection(server, services)
    port = bind(server, listen, credentials)
    # Bound, not yet accepting: 0600 before anyone can connect, like the serving socket.
    socket = None if socket_path is None else (socket_path, make_socket_private(socket_path))
    await server.start()
    for name in ("", *services):
        await servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    return StandbyServer(server, port, socket)
