"""The one shape of an interceptor that wraps corral's own method handlers: each corral.v1
method's handler is wrapped once and the wrapper cached (grpc asks for the handler on every
call), other services' handlers pass through untouched.

Must not: wrap health or reflection (they are not corral.v1's), or hold per-call state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc

PREFIX = "/corral.v1."

# intercept_service is generic in the request and response types of the handler it passes on.
Req = TypeVar("Req")
Resp = TypeVar("Resp")
# What an interceptor hands a call on to: grpc's next step, which finds the method's handler
# (a string: grpc's handler type is generic only to the type checker).
Continuation: TypeAlias = (
    "Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Req, Resp] | None]]"
)


class HandlerWrapper(grpc.aio.ServerInterceptor):
    """Subclasses say how one method's handler is wrapped (`wrap`)."""

    def __init__(self) -> None:
        # method -> (the handler grpc gave, its wrapper): a new handler is wrapped again.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def wrap(self, method: str, handler: Any) -> Any:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        method: str = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or not method.startswith(PREFIX):
            return handler
        wrapped = self._wrapped.get(method)
        if wrapped is None or wrapped[0] is not handler:
            wrapped = (handler, self.wrap(method, handler))
            self._wrapped[method] = wrapped
        result: grpc.RpcMethodHandler[Req, Resp] = wrapped[1]
        return result
