"""A hot standby's waiting server (`corral serve --standby`): while another daemon holds the state
directory, the standby listens on its address so a load balancer sees it, answers health
NOT_SERVING for "" and every service, and UNAVAILABLE with reason STANDBY to every call of
the agent services. Reflection (when on) and ServerService answer, so a person can ask it with
grpcurl what it is; with tokens, everything but health needs one, as on the daemon. It never
touches the state directory; the real daemon replaces it once the lock is free.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_server import errors
from corral_server.rpc.auth import TokenFile
from corral_server.rpc.bearer import BearerTokens
from corral_server.rpc.errors import install_client_gone, to_status
from corral_server.rpc.server import Listening, enable_reflection, listen_on
from corral_server.rpc.server_service import SERVICE_NAME, ServerService
from corral_server.rpc.wrapping import Continuation, Req, Resp
from corral_server.server_info import ServerInfo

HEALTH_PREFIX = "/grpc.health.v1.Health/"
# What a standby answers; reflection's v1 and v1alpha services share the prefix.
ANSWERED_PREFIXES = (HEALTH_PREFIX, "/grpc.reflection.", f"/{SERVICE_NAME}/")


def _identity(data: bytes) -> bytes:
    return data


async def _refuse(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    status = to_status(errors.Standby())
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: context.abort raises")


class _RefuseAgentCalls(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        if details.method.startswith(ANSWERED_PREFIXES):
            return await continuation(details)
        # Raw bytes in whatever the method's types: the refusal never decodes nor answers.
        refusal: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
            _refuse, request_deserializer=_identity, response_serializer=_identity
        )
        return refusal


async def start_standby_server(
    listen: str,
    services: tuple[str, ...],
    credentials: grpc.ServerCredentials | None,
    *,
    info: ServerInfo,
    tokens: TokenFile | None = None,
    reflection: bool = False,
) -> Listening:
    """The waiting server, bound and serving. `info` is what GetServerInfo answers (state
    STANDBY); `services` are the daemon's, for health and reflection. OSError (one line)
    when it cannot listen. The socket directory's warning is left to the daemon, once it
    serves."""
    install_client_gone()
    auth = [BearerTokens(tokens)] if tokens is not None else []
    server = grpc.aio.server(interceptors=[*auth, _RefuseAgentCalls()])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server_grpc.add_ServerServiceServicer_to_server(ServerService(lambda: info), server)
    if reflection:
        enable_reflection(server, services)
    waiting = await listen_on(server, listen, credentials)
    for name in ("", *services):
        await servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    return waiting
