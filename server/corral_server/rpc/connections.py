"""How many client connections may have calls open at once: one more is refused clearly.

grpc's own cap (the channel argument grpc.max_allowed_incoming_connections, which the daemon
sets at twice this limit against floods of idle connections) closes a connection past it
before a word of HTTP/2: its client sees only "Socket closed". This interceptor counts the
connections that have corral calls open, by peer address (a TCP peer's address and port name
one connection), and answers a call on one connection more with RESOURCE_EXHAUSTED, reason
STREAM_LIMIT, naming the limit. Health and reflection are neither counted nor refused.

Must not: hold anything per connection once its last call has ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from corral_server.errors import StreamLimit
from corral_server.rpc.errors import refuse
from corral_server.rpc.wrapping import HandlerWrapper


class ConnectionBook:
    """Open calls by peer; at most `max_connections` peers at once."""

    def __init__(self, max_connections: int) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be positive")
        self.max_connections = max_connections
        self._calls: dict[str, int] = {}

    @property
    def connections(self) -> int:
        return len(self._calls)

    def enter(self, peer: str) -> bool:
        calls = self._calls
        count = calls.get(peer)
        if count is None:
            if len(calls) >= self.max_connections:
                return False
            count = 0
        calls[peer] = count + 1
        return True

    def leave(self, peer: str) -> None:
        count = self._calls.get(peer, 0) - 1
        if count > 0:
            self._calls[peer] = count
        else:
            self._calls.pop(peer, None)

    def refusal(self) -> StreamLimit:
        limit = self.max_connections
        return StreamLimit(
            f"the daemon has calls open on {limit} client connections, its limit "
            "(--max-connections); reuse a connection or retry later",
            metadata={"max_connections": str(limit)},
        )


def _guarded(inner: Callable[[Any, Any], Awaitable[Any]], book: ConnectionBook) -> Any:
    """A handler with one answer (to a request, or to a stream of them) under the cap."""

    async def unary(request: Any, context: Any) -> Any:
        peer: str = context.peer()
        if not book.enter(peer):
            await refuse(context, book.refusal())
            return None
        try:
            return await inner(request, context)
        finally:
            book.leave(peer)

    return unary


def _wrap(handler: Any, book: ConnectionBook) -> Any:
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=_guarded(handler.unary_unary, book))
    if handler.unary_stream is not None:
        stream: Callable[[Any, Any], AsyncIterator[Any]] = handler.unary_stream

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            peer: str = context.peer()
            if not book.enter(peer):
                await refuse(context, book.refusal())
                return
            try:
                async for item in stream(request, context):
                    yield item
            finally:
                book.leave(peer)

        return handler._replace(unary_stream=streaming)
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=_guarded(handler.stream_unary, book))
    return handler


class ConnectionLimit(HandlerWrapper):
    def __init__(self, book: ConnectionBook) -> None:
        super().__init__()
        self.book = book

    def wrap(self, method: str, handler: Any) -> Any:
        return _wrap(handler, self.book)
