"""ForkAgent at the rpc edge: the request as a `ForkSpec`, the result as the response."""

from __future__ import annotations

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server.manager.fork import ForkSession, ForkSpec
from corral_server.manager.fork_rows import CutAt
from corral_server.manager.manager import AgentManager
from corral_server.rpc import bounds, convert
from corral_server.rpc.items import cursor_from_pb

_SESSIONS = {
    ForkSession.PROVIDER: svc_pb.FORK_SESSION_PROVIDER,
    ForkSession.CONTEXT: svc_pb.FORK_SESSION_CONTEXT,
    ForkSession.NEW: svc_pb.FORK_SESSION_NEW,
}


async def fork_agent(
    manager: AgentManager, request: svc_pb.ForkAgentRequest
) -> svc_pb.ForkAgentResponse:
    limits = manager.limits
    bounds.check_labels(request.labels, limits)
    bounds.check_string(request.title, limits.max_title_chars, "title")
    bounds.check_string(request.cursor.epoch, limits.max_id_chars, "cursor.epoch")
    match request.WhichOneof("at"):
        case "cursor":
            at = CutAt(cursor=cursor_from_pb(request.cursor))
        case _:  # a message id, or nothing (which the manager refuses)
            at = CutAt(message_id=request.message_id)
    spec = ForkSpec(request.agent_id, at, request.title, dict(request.labels))
    fork = await manager.fork(spec)
    return svc_pb.ForkAgentResponse(
        agent=convert.agent_to_pb(fork.agent), rows=fork.rows, session=_SESSIONS[fork.session]
    )
