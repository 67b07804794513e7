"""The three ways a web call is answered, chosen by the request's content type:

| content type                               | protocol          | answer                          |
|--------------------------------------------|-------------------|---------------------------------|
| application/proto, application/json        | Connect unary     | the message, or an error as     |
|                                            |                   | JSON with its HTTP status       |
| application/connect+proto, +json           | Connect streaming | envelopes, then the end-stream  |
|                                            |                   | message (0x02)                  |
| application/grpc-web(+proto, +json), -text | gRPC-Web          | envelopes, then the trailers    |
|                                            |                   | frame (0x80)                    |

Each responder is told every answer message (already encoded) and then the call's end: None
for success or the WebStatus of its error. A streamed answer's headers go out with its first
bytes; from then on an error can only end the stream in its own in-band format.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from google.rpc import status_pb2

from corral_server.web import framing
from corral_server.web.codecs import JSON, PROTO, Codec
from corral_server.web.context import WebStatus

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
Kind = Literal["connect", "connect-stream", "grpc-web"]


@dataclass(frozen=True, slots=True)
class Protocol:
    kind: Kind
    codec: Codec
    content_type: str  # of the answer
    text: bool = False  # grpc-web-text: request and answer base64

    def responder(self, send: Send, headers: Headers) -> Responder:
        match self.kind:
            case "connect":
                return ConnectUnary(self, send, headers)
            case "connect-stream":
                return Streamed(self, send, headers, self._end_stream)
            case "grpc-web":
                return Streamed(self, send, headers, _trailers)

    @staticmethod
    def _end_stream(status: WebStatus | None) -> bytes:
        end: dict[str, Any] = {} if status is None else {"error": connect_error(status)}
        return framing.envelope(framing.END_STREAM, json.dumps(end).encode())


_TYPES: dict[str, Protocol] = {
    "application/proto": Protocol("connect", PROTO, "application/proto"),
    "application/json": Protocol("connect", JSON, "application/json"),
    "application/connect+proto": Protocol("connect-stream", PROTO, "application/connect+proto"),
    "application/connect+json": Protocol("connect-stream", JSON, "application/connect+json"),
    "application/grpc-web": Protocol("grpc-web", PROTO, "application/grpc-web+proto"),
    "application/grpc-web+proto": Protocol("grpc-web", PROTO, "application/grpc-web+proto"),
    "application/grpc-web+json": Protocol("grpc-web", JSON, "application/grpc-web+json"),
    "application/grpc-web-text": Protocol(
        "grpc-web", PROTO, "application/grpc-web-text+proto", text=True
    ),
    "application/grpc-web-text+proto": Protocol(
        "grpc-web", PROTO, "application/grpc-web-text+proto", text=True
    ),
}
ACCEPTED = ", ".join(_TYPES)


def negotiate(content_type: str, streaming: bool) -> Protocol | None:
    """The protocol of a request with this content type to a method that streams or not;
    None when the pair is not one Connect or gRPC-Web defines (415)."""
    bare = content_type.partition(";")[0].strip().lower()
    protocol = _TYPES.get(bare)
    if protocol is None:
        return None
    unary_only = protocol.kind == "connect"
    streaming_only = protocol.kind == "connect-stream"
    if (unary_only and streaming) or (streaming_only and not streaming):
        return None
    return protocol


def connect_error(status: WebStatus) -> dict[str, Any]:
    """Connect's error object: code name, message, and the google.rpc details as
    {"type": full name, "value": unpadded base64 of the message}."""
    name, _ = framing.CONNECT_CODES.get(status.code, ("unknown", 500))
    error: dict[str, Any] = {"code": name}
    if status.message:
        error["message"] = status.message
    if status.details:
        parsed = status_pb2.Status.FromString(status.details)
        error["details"] = [
            {"type": d.type_url.rpartition("/")[2], "value": framing.b64_unpadded(d.value)}
            for d in parsed.details
        ]
    return error


def _trailers(status: WebStatus | None) -> bytes:
    if status is None:
        return framing.grpc_web_trailers(grpc.StatusCode.OK, "", None)
    return framing.grpc_web_trailers(status.code, status.message, status.details)


class Responder:
    def __init__(self, protocol: Protocol, send: Send, headers: Headers) -> None:
        self.protocol = protocol
        self._send = send
        self._headers = headers
        self.finished = False  # the call's end was written: nothing may follow it
        self.status: WebStatus | None = None  # the error the call ended with, once finished

    async def start(self, status: int, content_type: str, length: int | None = None) -> None:
        headers = [(b"content-type", content_type.encode()), *self._headers]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def message(self, data: bytes) -> None:
        raise NotImplementedError

    async def finish(self, status: WebStatus | None) -> None:
        """Write the call's end, once (a cut racing the call's own end writes nothing)."""
        if not self.finished:
            self.finished = True
            self.status = status
            await self._finish(status)

    async def _finish(self, status: WebStatus | None) -> None:
        raise NotImplementedError


class ConnectUnary(Responder):
    """One message with 200, or the error as JSON with the code's HTTP status."""

    def __init__(self, protocol: Protocol, send: Send, headers: Headers) -> None:
        super().__init__(protocol, send, headers)
        self._answer = b""

    async def message(self, data: bytes) -> None:
        self._answer = data

    async def _finish(self, status: WebStatus | None) -> None:
        if status is None:
            await self.start(200, self.protocol.content_type, len(self._answer))
            await self.body(self._answer, more=False)
            return
        _, http_status = framing.CONNECT_CODES.get(status.code, ("unknown", 500))
        error = json.dumps(connect_error(status)).encode()
        await self.start(http_status, "application/json", len(error))
        await self.body(error, more=False)


class Streamed(Responder):
    """Envelopes after a 200, ended by the protocol's in-band end of stream."""

    def __init__(
        self,
        protocol: Protocol,
        send: Send,
        headers: Headers,
        end: Callable[[WebStatus | None], bytes],
    ) -> None:
        super().__init__(protocol, send, headers)
        self._end = end
        self._started = False

    async def _write(self, data: bytes, more: bool) -> None:
        if not self._started:
            self._started = True
            await self.start(200, self.protocol.content_type)
        if self.protocol.text:
            data = base64.b64encode(data)
        await self.body(data, more)

    async def message(self, data: bytes) -> None:
        await self._write(framing.envelope(0, data), more=True)

    async def _finish(self, status: WebStatus | None) -> None:
        await self._write(self._end(status), more=False)
