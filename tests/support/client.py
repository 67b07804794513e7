"""Small helpers over the generated stubs, shared by the integration tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

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

Resp = TypeVar("Resp")


@dataclass
class SyncStubs:
    """The four services' stubs on one sync channel."""

    agents: agent_grpc.AgentServiceStub
    turns: turn_grpc.TurnServiceStub
    timeline: tl_grpc.TimelineServiceStub
    events: event_grpc.EventServiceStub


@dataclass
class Stubs:
    """The four services' stubs on one aio channel."""

    agents: agent_grpc.AgentServiceAsyncStub
    turns: turn_grpc.TurnServiceAsyncStub
    timeline: tl_grpc.TimelineServiceAsyncStub
    events: event_grpc.EventServiceAsyncStub

    # Like the generated stubs themselves: async stubs on an aio channel, sync ones otherwise.
    @overload
    @classmethod
    def of(cls, channel: grpc.aio.Channel) -> Stubs: ...
    @overload
    @classmethod
    def of(cls, channel: grpc.Channel) -> SyncStubs: ...
    @classmethod
    def of(cls, channel: grpc.aio.Channel | grpc.Channel) -> Stubs | SyncStubs:
        if isinstance(channel, grpc.aio.Channel):
            return cls(
                agent_grpc.AgentServiceStub(channel),
                turn_grpc.TurnServiceStub(channel),
                tl_grpc.TimelineServiceStub(channel),
                event_grpc.EventServiceStub(channel),
            )
        return SyncStubs(
            agent_grpc.AgentServiceStub(channel),
            turn_grpc.TurnServiceStub(channel),
            tl_grpc.TimelineServiceStub(channel),
            event_grpc.EventServiceStub(channel),
        )


async def next_message(
    call: grpc.aio.UnaryStreamCall[Any, Resp] | grpc.aio.StreamStreamCall[Any, Resp],
) -> Resp:
    """The stream's next message; the test fails when the stream has ended instead."""
    message = await call.read()
    assert message is not grpc.aio.EOF, "the stream ended"
    return cast(Resp, message)  # not EOF: a response (the stubs type read() as either)


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
    # Every RpcError a call raises is also the call (sync) or carries its trailers (aio).
    status: status_pb2.Status | None = rpc_status.from_call(cast(grpc.Call, error))
    reason = ""
    fields: list[str] = []
    if status is not None:
        for detail in status.details:
            info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
            if detail.Unpack(info):  # False, and nothing read, for another type of detail
                reason = info.reason
            elif detail.Unpack(bad):
                fields.extend(v.field for v in bad.field_violations)
    return ErrorDetails(error.code(), error.details() or "", reason, tuple(fields))
