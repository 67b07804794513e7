"""The bearer-token interceptor: every call but health needs a good token (rpc/auth.py checks
it) whose role permits the method (rpc/roles.py), and a call let in ends when its token is
revoked. Its method handler is wrapped so the
behaviour runs under the `OpenCall` of the token that let it in.

A revocation cancels the call's task (grpc.aio runs each call in a task of its own, and cancels
that same task when a client hangs up, so every servicer already unwinds cleanly from it); the
wrapper turns that cancellation into UNAUTHENTICATED / TOKEN_REVOKED. A streaming response is
written here with `context.write` instead of being yielded to grpc, so the wrapper knows when
a write is under way: grpc core takes no status while a message send is pending, so a call
revoked mid-write is not cancelled but stopped as soon as that write completes (a client that
never reads then gets nothing more, and its connection's keepalive ends it). Nothing is written
once the token is revoked, even by a servicer that swallowed the cancellation.

Must not: keep the token itself (the registry keys calls by digest), or leave a call in the
registry after it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from corral_server.rpc.auth import (
    EXEMPT_PREFIXES,
    TOKEN_REVOKED,
    OpenCall,
    TokenFile,
    checked_token,
    unauthenticated,
)
from corral_server.rpc.roles import CALLER_ROLE, denied, permits
from corral_server.rpc.wrapping import Continuation, Req, Resp

log = logging.getLogger(__name__)

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]


def revocable(
    handler: grpc.RpcMethodHandler[Any, Any] | None, tokens: TokenFile, token: bytes, role: str
) -> grpc.RpcMethodHandler[Any, Any] | None:
    """`handler` with its behaviour ended (UNAUTHENTICATED) when `token` is revoked."""
    if handler is None:  # no such method: grpc answers UNIMPLEMENTED
        return None
    kw: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    make: Callable[..., grpc.RpcMethodHandler[Any, Any]]
    match (handler.request_streaming, handler.response_streaming):
        case (False, False):
            make, behaviour = grpc.unary_unary_rpc_method_handler, handler.unary_unary
        case (False, True):
            make, behaviour = grpc.unary_stream_rpc_method_handler, handler.unary_stream
        case (True, False):
            make, behaviour = grpc.stream_unary_rpc_method_handler, handler.stream_unary
        case _:
            make, behaviour = grpc.stream_stream_rpc_method_handler, handler.stream_stream

    async def unary(request: Any, context: Context) -> Any:
        CALLER_ROLE.set(role)  # this call's task only
        return await _RevocableCall(tokens, context).answer(behaviour, request, token)

    async def streaming(request: Any, context: Context) -> None:
        CALLER_ROLE.set(role)
        await _RevocableCall(tokens, context).stream(behaviour, request, token)

    return make(streaming if handler.response_streaming else unary, **kw)


class _RevocableCall:
    """One call let in by a token: its behaviour runs under the token's `OpenCall`, and a
    revocation cancels its task, or, during a write, stops the stream once it is written."""

    def __init__(self, tokens: TokenFile, context: Context) -> None:
        task = asyncio.current_task()
        assert task is not None, "grpc.aio runs every call in a task"
        self._task = task
        self._tokens = tokens
        self._context = context
        # True while a message is being written: grpc core takes no status until that send
        # completes, so a revocation then waits for it (the stream stops right after).
        self._writing = False

    async def answer(self, behaviour: Any, request: Any, token: bytes) -> Any:
        return await self._under(token, lambda _: behaviour(request, self._context))

    async def stream(self, behaviour: Any, request: Any, token: bytes) -> None:
        async def write_all(call: OpenCall) -> None:
            result = behaviour(request, self._context)
            if not inspect.isasyncgen(result):
                await result  # a coroutine that writes with context.write itself
                return
            async with contextlib.aclosing(result) as messages:
                async for message in messages:
                    if call.revoked.is_set():
                        return  # nothing more goes out, even if the cancel was swallowed
                    await self._write(message)
                    if call.revoked.is_set():
                        return  # revoked while this message was being written

        await self._under(token, write_all)

    async def _under(self, token: bytes, work: Callable[[OpenCall], Awaitable[T]]) -> T:
        """`work`'s result, or UNAUTHENTICATED / TOKEN_REVOKED once the token is revoked."""
        with self._tokens.open_call(token) as call:
            if not call.revoked.is_set():  # revoked between the check and now: refused below
                call.on_revoke(self._cut)
                try:
                    result = await work(call)
                except asyncio.CancelledError:
                    if not call.revoked.is_set():
                        raise  # the client went away, or the server is stopping
                else:
                    if not call.revoked.is_set():
                        return result
        if self._task.cancelling():
            self._task.uncancel()  # the cancel was ours: the call lives on to say why
        status = unauthenticated(TOKEN_REVOKED)
        await self._context.abort(status.code, status.details, status.trailing_metadata)
        raise AssertionError("unreachable: abort raises")

    async def _write(self, message: Any) -> None:
        self._writing = True
        try:
            await self._context.write(message)
        finally:
            self._writing = False

    def _cut(self) -> None:
        if not self._writing:
            self._task.cancel()


def _ignore_body(_: bytes) -> None:
    """Refused calls never decode their request."""


def _refusal(handler: grpc.RpcMethodHandler[Any, Any] | None, status: grpc.Status) -> Any:
    """A handler of the same kind as `handler` that answers `status`."""

    async def refuse(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(status.code, status.details, status.trailing_metadata)

    async def unary(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await refuse(context)

    async def streaming(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await refuse(context)
        yield None  # unreachable: abort raises

    streams_in = handler is not None and handler.request_streaming
    streams_out = handler is not None and handler.response_streaming
    kw: dict[str, Any] = {"request_deserializer": _ignore_body}
    match (streams_in, streams_out):
        case (False, False):
            return grpc.unary_unary_rpc_method_handler(unary, **kw)
        case (False, True):
            return grpc.unary_stream_rpc_method_handler(streaming, **kw)
        case (True, False):
            return grpc.stream_unary_rpc_method_handler(unary, **kw)
        case _:
            return grpc.stream_stream_rpc_method_handler(streaming, **kw)


class BearerTokens(grpc.aio.ServerInterceptor):
    """Refuses, with UNAUTHENTICATED, every call but health that lacks a good bearer token,
    and ends a call let in when its token is revoked. Runs first, so a refused call's body is
    never decoded."""

    def __init__(self, tokens: TokenFile) -> None:
        self._tokens = tokens

    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        method: str = handler_call_details.method
        if method.startswith(EXEMPT_PREFIXES):
            return await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata
        reason, token = checked_token(self._tokens, metadata)
        handler = await continuation(handler_call_details)
        role = self._tokens.role_of(token) if not reason else None
        if role is not None and permits(role, method):
            return revocable(handler, self._tokens, token, role)
        log.debug("refused %s: %s", method, reason or "a read-only token")
        status = unauthenticated(reason) if reason else denied(method)
        result: grpc.RpcMethodHandler[Req, Resp] = _refusal(handler, status)
        return result
