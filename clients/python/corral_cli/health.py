"""Typed calls of the standard health service (grpc.health.v1.Health), on a sync or an aio
channel. The stub package types `HealthStub` without its methods, so these build the same
multi-callables grpc's generated stub does, with their request and response types.

Must not: hold a channel, or decide what a status means (status.py does).
"""

from __future__ import annotations

from typing import overload

import grpc
from grpc_health.v1 import health_pb2

_CHECK = "/grpc.health.v1.Health/Check"
_WATCH = "/grpc.health.v1.Health/Watch"

_Request = health_pb2.HealthCheckRequest
_Response = health_pb2.HealthCheckResponse


@overload
def check(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[_Request, _Response]: ...
@overload
def check(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable[_Request, _Response]: ...
def check(
    channel: grpc.Channel | grpc.aio.Channel,
) -> (
    grpc.UnaryUnaryMultiCallable[_Request, _Response]
    | grpc.aio.UnaryUnaryMultiCallable[_Request, _Response]
):
    """Health.Check: the serving status of one service ("" for the whole server)."""
    return channel.unary_unary(
        _CHECK,
        request_serializer=_Request.SerializeToString,
        response_deserializer=_Response.FromString,
    )


@overload
def watch(channel: grpc.aio.Channel) -> grpc.aio.UnaryStreamMultiCallable[_Request, _Response]: ...
@overload
def watch(channel: grpc.Channel) -> grpc.UnaryStreamMultiCallable[_Request, _Response]: ...
def watch(
    channel: grpc.Channel | grpc.aio.Channel,
) -> (
    grpc.UnaryStreamMultiCallable[_Request, _Response]
    | grpc.aio.UnaryStreamMultiCallable[_Request, _Response]
):
    """Health.Watch: the serving status now and on every change."""
    return channel.unary_stream(
        _WATCH,
        request_serializer=_Request.SerializeToString,
        response_deserializer=_Response.FromString,
    )
