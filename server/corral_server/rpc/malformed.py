"""Requests that do not decode get INVALID_ARGUMENT with details, like any other bad input.

Left alone, grpc answers an undecodable body with UNKNOWN and a Python exception name. This
interceptor swaps each corral method's request deserializer for one that turns a decode error
into a marker, and its behaviour for one that answers the marker with INVALID_ARGUMENT
(reason MALFORMED_REQUEST, a BadRequest naming the message type). Handlers are wrapped once per
method and cached. A call whose request was large tells the reclaimer once it is answered
(reclaim.py: the freed pages go back to the system).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from corral_server.errors import FieldViolation, InvalidArgument
from corral_server.reclaim import LARGE_REQUEST_BYTES, Reclaimer
from corral_server.rpc.errors import refuse
from corral_server.rpc.wrapping import HandlerWrapper

# Set by the request deserializer, which grpc runs in the call's own task, before its handler.
_large_request: ContextVar[bool] = ContextVar("large_request", default=False)


class MalformedRequest(InvalidArgument):
    reason = "MALFORMED_REQUEST"


@dataclass(frozen=True, slots=True)
class _Undecodable:
    detail: str


def _error(method: str, marker: _Undecodable) -> MalformedRequest:
    message = f"the request body is not a valid {method} request: {marker.detail}"
    return MalformedRequest(message, FieldViolation("", marker.detail))


def _wrap(method: str, handler: Any, reclaimer: Reclaimer) -> Any:
    deserialize: Callable[[bytes], Any] = handler.request_deserializer

    def safe(data: bytes) -> Any:
        if len(data) >= LARGE_REQUEST_BYTES:
            _large_request.set(True)
        try:
            return deserialize(data)
        except (DecodeError, UnicodeDecodeError) as exc:
            return _Undecodable(str(exc) or type(exc).__name__)

    if handler.unary_unary is not None:
        inner: Callable[[Any, Any], Awaitable[Any]] = handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            try:
                if isinstance(request, _Undecodable):
                    await refuse(context, _error(method, request))
                    return None
                return await inner(request, context)
            finally:
                if _large_request.get():
                    reclaimer.after_large_request()

        return handler._replace(request_deserializer=safe, unary_unary=unary)
    if handler.unary_stream is not None:
        stream: Callable[[Any, Any], AsyncIterator[Any]] = handler.unary_stream

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                if isinstance(request, _Undecodable):
                    await refuse(context, _error(method, request))
                    return
                async for item in stream(request, context):
                    yield item
            finally:
                if _large_request.get():
                    reclaimer.after_large_request()

        return handler._replace(request_deserializer=safe, unary_stream=streaming)
    if handler.stream_unary is not None:
        return handler._replace(
            request_deserializer=safe, stream_unary=_client_streaming(method, handler.stream_unary)
        )
    return handler


def _client_streaming(
    method: str, inner: Callable[[Any, Any], Awaitable[Any]]
) -> Callable[[Any, Any], Awaitable[Any]]:
    """A request stream's undecodable message is raised to its handler as MalformedRequest
    where it stands (the handler answers it as it answers any refusal)."""

    async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Undecodable):
                raise _error(method, request)
            yield request

    async def unary(requests: AsyncIterator[Any], context: Any) -> Any:
        return await inner(checked(requests), context)

    return unary


class MalformedRequests(HandlerWrapper):
    def __init__(self, reclaimer: Reclaimer | None = None) -> None:
        super().__init__()
        self.reclaimer = reclaimer or Reclaimer()

    def wrap(self, method: str, handler: Any) -> Any:
        return _wrap(method.removeprefix("/"), handler, self.reclaimer)
