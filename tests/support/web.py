"""A small Connect / gRPC-Web client for the web port's tests, written from the protocols'
specifications and sharing no code with the server's web/ package: envelopes are parsed here
with struct, JSON with protobuf's json_format."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2 as httpx
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

M = TypeVar("M", bound=Message)


async def no_open_calls(daemon: Any) -> None:
    """Until the daemon's web port has let go of every call (it does so just after a call's
    last byte, so a client may be a moment ahead of it). `daemon` is a DaemonThread."""
    web = daemon.daemon.web
    deadline = asyncio.get_running_loop().time() + 10
    while len(web.calls):
        assert asyncio.get_running_loop().time() < deadline, "web calls stay open"
        await asyncio.sleep(0.01)


def through_turn(events: list[Any], turn_id: str) -> list[Any] | None:
    """`events` up to and including `turn_id`'s turn_completed, or None before it came. Streams
    cut the same events into batches differently, so two streams are compared to this point."""
    for index, event in enumerate(events):
        if event.HasField("turn_completed") and event.turn_completed.turn_id == turn_id:
            return events[: index + 1]
    return None


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """(flags, payload) of each envelope in a whole body; asserts nothing is left over."""
    out: list[tuple[int, bytes]] = []
    while data:
        assert len(data) >= 5, f"a truncated envelope prefix: {data!r}"
        flags, length = struct.unpack(">BI", data[:5])
        assert len(data) >= 5 + length, "a truncated envelope"
        out.append((flags, data[5 : 5 + length]))
        data = data[5 + length :]
    return out


class FrameReader:
    """Envelopes out of a streamed body, as they arrive."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    async def next(self) -> tuple[int, bytes] | None:
        while True:
            if len(self._buffer) >= 5:
                flags, length = struct.unpack(">BI", self._buffer[:5])
                if len(self._buffer) >= 5 + length:
                    payload = self._buffer[5 : 5 + length]
                    self._buffer = self._buffer[5 + length :]
                    return flags, payload
            try:
                self._buffer += await self._chunks.__anext__()
            except StopAsyncIteration:
                assert not self._buffer, f"the stream ended inside an envelope: {self._buffer!r}"
                return None


def to_json(message: Message) -> bytes:
    return json.dumps(json_format.MessageToDict(message)).encode()


def from_json(data: bytes | str | dict[str, Any], cls: type[M]) -> M:
    text = data if isinstance(data, (bytes, str)) else json.dumps(data)
    return json_format.Parse(text, cls())


def unb64(value: str) -> bytes:
    return base64.b64decode(value + "=" * (-len(value) % 4))


@dataclass
class WebError:
    """An error as a web client sees it: Connect's code name (or gRPC's number), message and
    the decoded google.rpc details."""

    code: str
    message: str
    reason: str = ""
    fields: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)


def _with_details(error: WebError, details: list[tuple[str, bytes]]) -> WebError:
    for type_name, value in details:
        if type_name == "google.rpc.ErrorInfo":
            info = error_details_pb2.ErrorInfo.FromString(value)
            error.reason, error.metadata = info.reason, dict(info.metadata)
        elif type_name == "google.rpc.BadRequest":
            bad = error_details_pb2.BadRequest.FromString(value)
            error.fields = tuple(v.field for v in bad.field_violations)
    return error


def connect_error(body: dict[str, Any]) -> WebError:
    details = [(d["type"], unb64(d["value"])) for d in body.get("details", [])]
    return _with_details(WebError(body["code"], body.get("message", "")), details)


def grpc_web_trailers(payload: bytes) -> dict[str, str]:
    lines = payload.decode().split("\r\n")
    return {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)
    }


def grpc_web_error(trailers: dict[str, str]) -> WebError:
    from urllib.parse import unquote

    error = WebError(trailers["grpc-status"], unquote(trailers.get("grpc-message", "")))
    raw = trailers.get("grpc-status-details-bin")
    if raw:
        status = status_pb2.Status.FromString(unb64(raw))
        details = [(d.type_url.rpartition("/")[2], d.value) for d in status.details]
        _with_details(error, details)
    return error


class Web:
    """Calls on the web port."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.http = client

    async def unary(
        self,
        method: str,
        request: Message,
        out: type[M],
        *,
        json_codec: bool = False,
        **headers: str,
    ) -> M | WebError:
        """A Connect unary call: the response message, or the error."""
        kind = "application/json" if json_codec else "application/proto"
        body = to_json(request) if json_codec else request.SerializeToString()
        answer = await self.http.post(
            f"/corral.v1.{method}",
            content=body,
            headers={"content-type": kind, "connect-protocol-version": "1", **headers},
        )
        if answer.status_code != 200:
            assert answer.headers["content-type"] == "application/json", answer.text
            return connect_error(answer.json())
        assert answer.headers["content-type"] == kind
        return from_json(answer.content, out) if json_codec else out.FromString(answer.content)

    async def grpc_web(
        self,
        method: str,
        request: Message,
        out: type[M],
        *,
        json_codec: bool = False,
        **headers: str,
    ) -> tuple[list[M], WebError]:
        """A whole gRPC-Web call: its messages and its status (code "0" for OK)."""
        kind = "application/grpc-web+json" if json_codec else "application/grpc-web+proto"
        body = to_json(request) if json_codec else request.SerializeToString()
        answer = await self.http.post(
            f"/corral.v1.{method}",
            content=envelope(body),
            headers={"content-type": kind, "x-grpc-web": "1", **headers},
        )
        assert answer.status_code == 200, answer.text
        messages: list[M] = []
        trailers: dict[str, str] = {}
        for flags, payload in frames(answer.content):
            if flags & 0x80:
                trailers = grpc_web_trailers(payload)
            else:
                messages.append(from_json(payload, out) if json_codec else out.FromString(payload))
        assert trailers, "no trailers frame"
        return messages, grpc_web_error(trailers)


class Stream:
    """A streamed answer (Connect streaming or gRPC-Web), read message by message."""

    def __init__(self, response: httpx.Response, out: type[Message], json_codec: bool) -> None:
        self.response = response
        self._out = out
        self._json = json_codec
        self._frames = FrameReader(response.aiter_bytes())
        self.end: dict[str, Any] | None = None  # Connect's end-stream message
        self.trailers: dict[str, str] | None = None  # gRPC-Web's trailers

    async def read(self) -> Any:
        """The next message, or None once the stream's end came (then `end` / `trailers`)."""
        frame = await self._frames.next()
        assert frame is not None, "the body ended without an end-stream message"
        flags, payload = frame
        if flags == 0x02:
            self.end = json.loads(payload)
            assert await self._frames.next() is None, "bytes after the end-stream message"
            return None
        if flags == 0x80:
            self.trailers = grpc_web_trailers(payload)
            assert await self._frames.next() is None, "bytes after the trailers"
            return None
        assert flags == 0, f"unexpected flags {flags}"
        return from_json(payload, self._out) if self._json else self._out.FromString(payload)

    def error(self) -> WebError | None:
        if self.end is not None:
            return connect_error(self.end["error"]) if "error" in self.end else None
        assert self.trailers is not None
        return None if self.trailers["grpc-status"] == "0" else grpc_web_error(self.trailers)


async def read_synced(stream: Stream) -> list[Any]:
    """The events of a Subscribe stream through its `synced` (the snapshot may take several
    messages)."""
    events: list[Any] = []
    while not any(e.HasField("synced") for e in events):
        message = await stream.read()
        assert message is not None, f"the stream ended before synced: {stream.error()}"
        events.extend(message.events)
    return events


async def grpc_synced(call: Any) -> list[Any]:
    """The same for a gRPC Subscribe call."""
    events: list[Any] = []
    while not any(e.HasField("synced") for e in events):
        events.extend((await call.read()).events)
    return events


def stream_request(
    method: str, request: Message, *, protocol: str = "connect", json_codec: bool = False
) -> dict[str, Any]:
    """httpx `stream()` arguments for a server-streaming call."""
    codec = "json" if json_codec else "proto"
    kind = (
        f"application/connect+{codec}" if protocol == "connect" else f"application/grpc-web+{codec}"
    )
    body = to_json(request) if json_codec else request.SerializeToString()
    return {
        "method": "POST",
        "url": f"/corral.v1.{method}",
        "content": envelope(body),
        "headers": {"content-type": kind},
    }
