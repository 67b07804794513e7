"""The web port's ASGI application: corral.v1 calls on POST /corral.v1.Service/Method, CORS
preflights, and the dashboard's static files on GET.

The order of a call's checks: host and origin (403, nothing read), the protocol from the
content type (415), Connect-Protocol-Version, the bearer token, the method (unimplemented),
the caps on open calls; then rpc.py reads and runs it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import grpc

from corral_server.errors import ResourceExhausted
from corral_server.rpc.roles import CALLER_ROLE
from corral_server.web.access import Access, Headers
from corral_server.web.calls import OpenCall, OpenCalls
from corral_server.web.context import WebCallError, WebContext, WebStatus
from corral_server.web.methods import Method
from corral_server.web.protocols import ACCEPTED, Protocol, Responder, connect_error, negotiate
from corral_server.web.rpc import (
    ClientGone,
    body_limit,
    deadline,
    decode_request,
    execute,
    read_body,
    until_disconnect,
)
from corral_server.web.static import StaticFiles

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

RPC_PREFIX = "/corral.v1."
# A request body must have arrived within this (wall clock): a client trickling bytes would
# otherwise hold one of its call slots for ever.
BODY_TIMEOUT_S = 30.0


class TooManyCalls(ResourceExhausted):
    reason = "TOO_MANY_WEB_CALLS"


async def plain(send: Send, status: int, text: str, headers: Headers | None = None) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _headers(scope: Scope) -> tuple[dict[str, str], list[str]]:
    """The request's headers (the last of a repeated name) and every authorization value."""
    single: dict[str, str] = {}
    authorization: list[str] = []
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        single[name] = value
        if name == "authorization":
            authorization.append(value)
    return single, authorization


class WebApp:
    def __init__(
        self,
        methods: Mapping[str, Method],
        access: Access,
        calls: OpenCalls,
        static: StaticFiles,
        max_request_bytes: int,
        rpc_errors: Counter[str] | None = None,
    ) -> None:
        self._methods = methods
        # Calls answered with an error, by status code: the daemon's count, shared with its
        # gRPC edge (rpc/error_counts.py), for the metrics.
        self.rpc_errors: Counter[str] = Counter() if rpc_errors is None else rpc_errors
        self.access = access
        self.calls = calls
        self._static = static
        self._max_request_bytes = max_request_bytes
        self.body_timeout_s = BODY_TIMEOUT_S

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers, authorization = _headers(scope)
        refusal = self.access.refusal(scope.get("scheme", "http"), headers)
        if refusal:
            await plain(send, 403, refusal)
            return
        verb, path = scope["method"], scope["path"]
        if verb == "OPTIONS":
            await plain(send, 204, "", self.access.preflight(headers))
        elif path.startswith(RPC_PREFIX) or verb == "POST":
            if verb != "POST":
                await plain(send, 405, "corral.v1 calls are POST requests", [(b"allow", b"POST")])
                return
            await self._rpc(scope, receive, send, headers, authorization)
        elif verb in ("GET", "HEAD"):
            await self._static.serve(path, verb, headers, send)
        else:
            await plain(send, 405, f"{verb} is not served here", [(b"allow", b"GET, POST")])

    async def _rpc(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        authorization: list[str],
    ) -> None:
        method = self._methods.get(scope["path"])
        content_type = headers.get("content-type", "")
        protocol = negotiate(content_type, method.streaming if method else False)
        if protocol is None and method is None:
            protocol = negotiate(content_type, True)
        if protocol is None:
            text = f"unsupported content type {content_type!r} for this call; use one of {ACCEPTED}"
            await plain(send, 415, text, [(b"accept-post", ACCEPTED.encode())])
            return
        out = protocol.responder(send, self.access.cors(headers))
        try:
            await self._answer(scope, receive, headers, authorization, method, protocol, out)
        finally:
            if out.status is not None and out.status.code is not grpc.StatusCode.OK:
                self.rpc_errors[out.status.code.name] += 1

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        headers: dict[str, str],
        authorization: list[str],
        method: Method | None,
        protocol: Protocol,
        out: Responder,
    ) -> None:
        version = headers.get("connect-protocol-version")
        if protocol.kind != "grpc-web" and version not in (None, "1"):
            await out.finish(_invalid(f"connect-protocol-version {version!r} is not 1"))
            return
        encoding = _compression(headers, protocol)
        if encoding:
            text = f"{encoding!r} compressed requests are not accepted (send identity)"
            await out.finish(WebStatus(grpc.StatusCode.UNIMPLEMENTED, text))
            return
        refused, digest, role = self.access.authenticate(authorization, scope["path"])
        if refused is not None:
            await out.finish(refused)
            return
        if method is None:
            await _unimplemented(out, scope["path"])
            return
        client = (scope.get("client") or ("?", 0))[0]
        cap = self.calls.refusal(client)
        if cap:
            await out.finish(WebCallError.of(TooManyCalls(cap)).status)
            return
        CALLER_ROLE.set(role)  # the call's task is made in this one's context (GetServerInfo)
        record = OpenCall(client, digest)
        key = self.calls.add(record)
        try:
            await self._run(scope, receive, method, protocol, out, headers, record)
        finally:
            self.calls.remove(key)

    async def _run(
        self,
        scope: Scope,
        receive: Receive,
        method: Method,
        protocol: Protocol,
        out: Responder,
        headers: dict[str, str],
        record: OpenCall,
    ) -> None:
        declared = headers.get("content-length")
        limit = body_limit(protocol, self._max_request_bytes)
        try:
            size = int(declared) if declared is not None and declared.isdigit() else None
            async with asyncio.timeout(self.body_timeout_s):
                body = await read_body(receive, size, limit)
            request = decode_request(body, protocol, method)
            context = WebContext(
                _metadata(headers),
                _peer(scope),
                deadline(headers, protocol),
                headers.get("authorization", ""),
            )
        except ClientGone:
            return
        except TimeoutError:
            text = f"the request body did not arrive within {self.body_timeout_s:g} s"
            await out.finish(WebStatus(grpc.StatusCode.DEADLINE_EXCEEDED, text))
            return
        except WebCallError as refused:
            await out.finish(refused.status)
            return
        work = asyncio.ensure_future(execute(method, request, context, out))
        record.task = work
        watch = asyncio.ensure_future(until_disconnect(receive))
        try:
            await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone = watch.done()
            work.cancel()
            watch.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)
        if record.cut_status is not None and not gone:
            await out.finish(record.cut_status)


# The header naming a request's compression, by protocol.
_ENCODING_HEADER = {
    "connect": "content-encoding",
    "connect-stream": "connect-content-encoding",
    "grpc-web": "grpc-encoding",
}


def _compression(headers: dict[str, str], protocol: Protocol) -> str:
    """The request's compression when it is not identity (refused), or ""."""
    encoding = headers.get(_ENCODING_HEADER[protocol.kind], "identity").strip().lower()
    return "" if encoding == "identity" else encoding


def _metadata(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in headers.items() if k != "authorization")


def _peer(scope: Scope) -> str:
    host, port = scope.get("client") or ("?", 0)
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def _invalid(message: str) -> WebStatus:
    return WebStatus(grpc.StatusCode.INVALID_ARGUMENT, message)


async def _unimplemented(out: Responder, path: str) -> None:
    status = WebStatus(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {path.lstrip('/')}")
    if out.protocol.kind == "connect":  # the protocol answers an unknown route with 404
        error = json.dumps(connect_error(status)).encode()
        await out.start(404, "application/json", len(error))
        await out.body(error, more=False)
        return
    await out.finish(status)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
