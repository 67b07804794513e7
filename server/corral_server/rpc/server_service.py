"""corral.v1.ServerService: the daemon describes itself (server_info.py has the facts).

A service of its own rather than a method of AgentService: it is about the daemon, not its
agents, and a standby answers it whole, next to health and reflection (rpc/standby.py lets the
service's prefix through), while every agent call there answers STANDBY.
"""

from __future__ import annotations

from collections.abc import Callable

from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_server.rpc.errors import Ctx, unary
from corral_server.rpc.roles import CALLER_ROLE
from corral_server.server_info import ServerInfo, ServingState

SERVICE_NAME = server_pb.DESCRIPTOR.services_by_name["ServerService"].full_name

_STATE = {
    ServingState.SERVING: server_pb.SERVING_STATE_SERVING,
    ServingState.DRAINING: server_pb.SERVING_STATE_DRAINING,
    ServingState.STANDBY: server_pb.SERVING_STATE_STANDBY,
}


def encode_server_info(info: ServerInfo) -> server_pb.GetServerInfoResponse:
    limits, features = info.limits, info.features
    return server_pb.GetServerInfoResponse(
        version=info.version,
        api_version=info.api_version,
        state=_STATE[info.state],
        incarnation=info.incarnation,
        head_revision=info.head_revision,
        limits=server_pb.ServerLimits(
            max_request_bytes=limits.max_request_bytes,
            max_prompt_chars=limits.max_prompt_chars,
            max_prompt_bytes=limits.max_prompt_bytes,
            max_content_parts=limits.max_content_parts,
            max_ids_per_request=limits.max_ids_per_request,
            max_id_chars=limits.max_id_chars,
            max_labels=limits.max_labels,
            max_streams_per_connection=limits.max_streams_per_connection,
        ),
        providers=info.providers,
        features=server_pb.ServerFeatures(
            tokens=features.tokens,
            tls=features.tls,
            mutual_tls=features.mutual_tls,
            reflection=features.reflection,
            web=bool(features.web_url),
            web_url=features.web_url,
            mcp=features.mcp,
            metrics=bool(features.metrics_url),
            metrics_url=features.metrics_url,
            standby=features.standby,
        ),
    )


class ServerService(server_grpc.ServerServiceServicer):
    """`describe` is asked at every call: the state and the head move."""

    def __init__(self, describe: Callable[[], ServerInfo]) -> None:
        self._describe = describe

    @unary
    async def GetServerInfo(
        self, request: server_pb.GetServerInfoRequest, context: Ctx
    ) -> server_pb.GetServerInfoResponse:
        answer = encode_server_info(self._describe())
        answer.caller_role = CALLER_ROLE.get()
        return answer
