"""The one shape of an interceptor that wraps corral's own method handlers: each corral.v1
method's handler is wrapped once and the wrapper cached (grpc asks for the handler on every
call), other services' handlers pass through untouched.

Must not: wrap health or reflection (they are not corral.v1's), or hold per-call state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

PREFIX = "/corral.v1."

if TYPE_CHECKING:  # generic in the stubs only
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor


class HandlerWrapper(_Interceptor):
    """Subclasses say how one method's handler is wrapped (`wrap`)."""

    def __init__(self) -> None:
        # method -> (the handler grpc gave, its wrapper): a new handler is wrapped again.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def wrap(self, method: str, handler: Any) -> Any:
        raise NotImplementedError

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
            wrapped = (handler, self.wrap(method, handler))
            self._wrapped[method] = wrapped
        result: grpc.RpcMethodHandler[Any, Any] = wrapped[1]
        return result
