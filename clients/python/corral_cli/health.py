"""Typed stubs of the standard health service (grpc.health.v1.Health), for a sync or an aio
channel. The stub package declares grpc_health's `HealthStub` without its methods, so this
builds the same two multi-callables the generated stub does, with their message types.

Must not: hold a channel, or decide what a status means (status.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, overload

import grpc
from grpc_health.v1 import health_pb2

_Request: TypeAlias = health_pb2.HealthCheckRequest
_Response: TypeAlias = health_pb2.HealthCheckResponse


@dataclass(frozen=True)
class HealthStub:
    Check: grpc.UnaryUnaryMultiCallable[_Request, _Response]
    Watch: grpc.UnaryStreamMultiCallable[_Request, _Response]


@dataclass(frozen=True)
class AsyncHealthStub:
    Check: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response]
    Watch: grpc.aio.UnaryStreamMultiCallable[_Request, _Response]


@overload
def health_stub(channel: grpc.aio.Channel) -> AsyncHealthStub: ...
@overload
def health_stub(channel: grpc.Channel) -> HealthStub: ...
def health_stub(channel: grpc.Channel | grpc.aio.Channel) -> HealthStub | AsyncHealthStub:
    """Health.Check (the serving status of one service, "" for the whole server) and
    Health.Watch (that status now and on every change), on `channel`."""
    check = "/grpc.health.v1.Health/Check"
    watch = "/grpc.health.v1.Health/Watch"
    encode, decode = _Request.SerializeToString, _Response.FromString
    if isinstance(channel, grpc.aio.Channel):
        return AsyncHealthStub(
            channel.unary_unary(check, request_serializer=encode, response_deserializer=decode),
            channel.unary_stream(watch, request_serializer=encode, response_deserializer=decode),
        )
    return HealthStub(
        channel.unary_unary(check, request_serializer=encode, response_deserializer=decode),
        channel.unary_stream(watch, request_serializer=encode, response_deserializer=decode),
    )
