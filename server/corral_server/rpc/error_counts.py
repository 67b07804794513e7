"""Counts one daemon's corral.v1 calls answered with an error, by status code name, for its
metrics (`corral_rpc_errors_total`). The outermost interceptor: it reads the code each call
ended with from the call's context, so a refusal counts once wherever it was decided (the
bearer tokens, the connection cap, the malformed-request guard, a servicer's domain error or
an unknown exception answered INTERNAL). The web edge counts its own calls into the same
counter (web/app.py).

Must not: count a call its client gave up on (the handler is cancelled: nobody is answered),
or calls of health and reflection (not corral.v1's). The counter is the daemon's own, never
the process's: two daemons in one process count apart.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from corral_server.rpc.wrapping import HandlerWrapper


def _counted(counts: Counter[str], context: Any) -> None:
    code: grpc.StatusCode | None = context.code()
    if code is not None and code is not grpc.StatusCode.OK:
        counts[code.name] += 1


def _around_coroutine(
    inner: Callable[[Any, Any], Awaitable[Any]], counts: Counter[str]
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def answering(request: Any, context: Any) -> Any:
        try:
            answer = await inner(request, context)
        except Exception:  # an abort raised through (CancelledError is not an Exception)
            _counted(counts, context)
            raise
        _counted(counts, context)  # a refusal the handler answered and returned from
        return answer

    return answering


def _around_stream(
    stream: Callable[[Any, Any], AsyncIterator[Any]], counts: Counter[str]
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            async for item in stream(request, context):
                yield item
        except Exception:
            _counted(counts, context)
            raise
        _counted(counts, context)

    return streaming


def _wrap(handler: Any, counts: Counter[str]) -> Any:
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=_around_coroutine(handler.unary_unary, counts))
    if handler.unary_stream is not None:
        stream = handler.unary_stream
        # A stream the bearer tokens let in is written with context.write by a coroutine
        # (rpc/bearer.py); grpc tells the two kinds apart by the function, so keep the kind.
        if inspect.iscoroutinefunction(stream):
            return handler._replace(unary_stream=_around_coroutine(stream, counts))
        return handler._replace(unary_stream=_around_stream(stream, counts))
    return handler


class ErrorCounts(HandlerWrapper):
    def __init__(self, counts: Counter[str]) -> None:
        super().__init__()
        self.counts = counts

    def wrap(self, method: str, handler: Any) -> Any:
        return _wrap(handler, self.counts)
