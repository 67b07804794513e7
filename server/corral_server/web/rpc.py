"""One web call, from its body to its last byte: read the body within the size limit, decode
the request, run the servicer with a WebContext (under the client's deadline, cancelled when
the client goes away), and write each answer message and the call's end through the
protocol's responder.

Must not: read more than the limit allows, decode a body of a refused call, or leave a
servicer's stream open after its HTTP exchange ended.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import grpc
from google.protobuf.message import Message

from corral_server import errors
from corral_server.errors import FieldViolation
from corral_server.rpc.malformed import MalformedRequest
from corral_server.web import framing
from corral_server.web.codecs import BodyError
from corral_server.web.context import WebAbort, WebCallError, WebContext, WebStatus
from corral_server.web.methods import Method
from corral_server.web.protocols import Protocol, Responder

log = logging.getLogger(__name__)

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

_GRPC_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")
_GRPC_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class RequestTooLarge(errors.ResourceExhausted):
    reason = "REQUEST_TOO_LARGE"


class ClientGone(Exception):
    """The client hung up before its request was read."""


def _malformed(method: Method, detail: str) -> WebCallError:
    message = f"the request body is not a valid {method.name} request: {detail}"
    return WebCallError.of(MalformedRequest(message, FieldViolation("", detail)))


def body_limit(protocol: Protocol, max_request_bytes: int) -> int:
    """Bytes a request body may have: the message limit, plus the envelope's prefix, in
    base64 for grpc-web-text."""
    limit = max_request_bytes if protocol.kind == "connect" else max_request_bytes + 5
    return (limit + 2) // 3 * 4 if protocol.text else limit


def _too_large(limit: int) -> WebCallError:
    return WebCallError.of(
        RequestTooLarge(
            f"the request body is larger than the limit of {limit} bytes (--max-request-bytes)",
            metadata={"limit_bytes": str(limit)},
        )
    )


async def read_body(receive: Receive, declared: int | None, limit: int) -> bytes:
    """The request body, read up to `limit` bytes and refused past it (by its declared
    content-length at once, or as it arrives)."""
    if declared is not None and declared > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def decode_request(body: bytes, protocol: Protocol, method: Method) -> Message:
    """The request message; WebCallError (INVALID_ARGUMENT, MALFORMED_REQUEST) when the body
    is not one."""
    try:
        if protocol.text:
            body = base64.b64decode(body, validate=True)
        payload = body if protocol.kind == "connect" else framing.single_envelope(body)
        return protocol.codec.decode(payload, method.request_type)
    except (BodyError, framing.EnvelopeError, binascii.Error) as exc:
        raise _malformed(method, str(exc)) from None


def deadline(headers: dict[str, str], protocol: Protocol) -> float | None:
    """The call's deadline (time.monotonic seconds) from connect-timeout-ms or grpc-timeout;
    WebCallError (INVALID_ARGUMENT) when the header is not valid."""
    if protocol.kind == "grpc-web":
        raw = headers.get("grpc-timeout")
        if raw is None:
            return None
        match = _GRPC_TIMEOUT.match(raw)
        if match is None:
            raise WebCallError.of(errors.InvalidArgument.field("grpc-timeout", "not valid"))
        seconds = int(match.group(1)) * _GRPC_UNITS[match.group(2)]
    else:
        raw = headers.get("connect-timeout-ms")
        if raw is None:
            return None
        if not raw.isdigit() or len(raw) > 10:
            raise WebCallError.of(
                errors.InvalidArgument.field("connect-timeout-ms", "at most 10 digits")
            )
        seconds = int(raw) / 1000
    return time.monotonic() + seconds


async def execute(method: Method, request: Message, context: WebContext, out: Responder) -> None:
    """Run the servicer and write its answer and its end through `out`."""
    codec = out.protocol.codec
    remaining = context.time_remaining()
    status: WebStatus | None = None
    timeout = asyncio.timeout(remaining)
    try:
        async with timeout:
            if method.streaming:
                async with contextlib.aclosing(method.call(request, context)) as stream:
                    async for item in stream:
                        await out.message(codec.encode(item, method.response_type))
            else:
                response = await method.call(request, context)
                await out.message(codec.encode(response, method.response_type))
    except WebAbort as abort:
        status = abort.status
    except errors.CorralError as error:  # a servicer without the rpc edge's error wrapper
        status = WebStatus.of(error)
    except TimeoutError:
        if not timeout.expired():
            raise
        status = WebStatus(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed")
    except Exception as exc:  # every unknown error answers INTERNAL, never a hung stream
        log.exception("internal error in web call %s", method.name, exc_info=exc)
        status = WebStatus(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")
    await out.finish(status)


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client hangs up (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
