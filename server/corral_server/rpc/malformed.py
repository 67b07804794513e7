"""Requests that do not decode get INVALID_ARGUMENT with details, like any other bad input.

Left alone, grpc answers an undecodable body with UNKNOWN and a Python exception name. This
interceptor swaps each corral method's request deserializer for one that turns a decode error
into a marker, and its behaviour for one that answers the marker with INVALID_ARGUMENT
(reason MALFORMED_REQUEST, a BadRequest naming the message type). Handlers are wrapped once per
method and cached.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from corral_server.errors import FieldViolation, InvalidArgument
from corral_server.rpc.errors import abort

PREFIX = "/corral.v1."


class MalformedRequest(InvalidArgument):
    reason = "MALFORMED_REQUEST"


@dataclass(frozen=True, slots=True)
class _Undecodable:
    detail: str


def _error(method: str, marker: _Undecodable) -> MalformedRequest:
    message = f"the request body is not a valid {method} request: {marker.detail}"
    return MalformedRequest(message, FieldViolation("", marker.detail))


def _wrap(method: str, handler: Any) -> Any:
    deserialize: Callable[[bytes], Any] = handler.request_deserializer

    def safe(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, UnicodeDecodeError) as exc:
            return _Undecodable(str(exc) or type(exc).__name__)

    if handler.unary_unary is not None:
        inner: Callable[[Any, Any], Awaitable[Any]] = handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await abort(context, _error(method, request))
            return await inner(request, context)

        return handler._replace(request_deserializer=safe, unary_unary=unary)
    if handler.unary_stream is not None:
        stream: Callable[[Any, Any], AsyncIterator[Any]] = handler.unary_stream

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await abort(context, _error(method, request))
            async for item in stream(request, context):
                yield item

        return handler._replace(request_deserializer=safe, unary_stream=streaming)
    return handler


if TYPE_CHECKING:  # generic in the stubs only
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor


class MalformedRequests(_Interceptor):
    def __init__(self) -> None:
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or not method.startswith(PREFIX):
            return handler
        wrapped = self._wrapped.get(method)
        if wrapped is None or wrapped[0] is not handler:
            wrapped = (handler, _wrap(method.removeprefix("/"), handler))
            self._wrapped[method] = wrapped
        result: grpc.RpcMethodHandler[Any, Any] = wrapped[1]
        return result
