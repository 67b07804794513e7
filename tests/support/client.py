"""Small helpers over the generated stubs, shared by the integration tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import agent_service_pb2_grpc as agent_grpc
from corral.v1 import content_pb2 as content_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_service_pb2_grpc as tl_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import turn_service_pb2_grpc as turn_grpc


@dataclass
class Stubs:
    agents: agent_grpc.AgentServiceStub
    turns: turn_grpc.TurnServiceStub
    timeline: tl_grpc.TimelineServiceStub
    events: event_grpc.EventServiceStub

    @classmethod
    def of(cls, channel: Any) -> Stubs:
        return cls(
            agent_grpc.AgentServiceStub(channel),
            turn_grpc.TurnServiceStub(channel),
            tl_grpc.TimelineServiceStub(channel),
            event_grpc.EventServiceStub(channel),
        )


def text(*lines: str) -> list[content_pb.ContentPart]:
    return [content_pb.ContentPart(text="\n".join(lines))]


def create_request(cwd: str, **kw: Any) -> agent_pb.CreateAgentRequest:
    return agent_pb.CreateAgentRequest(provider=kw.pop("provider", "scripted"), cwd=cwd, **kw)


def prompt_request(agent_id: str, *lines: str, **kw: Any) -> turn_pb.SendPromptRequest:
    return turn_pb.SendPromptRequest(agent_id=agent_id, content=text(*lines), **kw)


@dataclass(frozen=True)
class ErrorDetails:
    code: grpc.StatusCode
    message: str
    reason: str
    fields: tuple[str, ...]


def error_details(error: grpc.RpcError) -> ErrorDetails:
    """The status code, ErrorInfo reason and BadRequest fields of a failed call."""
    status: status_pb2.Status | None = rpc_status.from_call(error)  # type: ignore[arg-type]
    reason, fields = "", []
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                fields.extend(v.field for v in bad.field_violations)
    return ErrorDetails(error.code(), error.details() or "", reason, tuple(fields))  # type: ignore[attr-defined]
