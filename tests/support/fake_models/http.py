"""A small HTTP/1.1 server on asyncio streams, enough for the model clients of the real agents.

It owns parsing one request per connection (Content-Length or chunked bodies, gzip request
bodies) and writing either a whole JSON body or a server-sent-events stream. Every response
says `Connection: close` and the connection is closed after it, so a client never reuses a
socket the server is about to drop. It must not know any model API: routing is the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

# Bounds: a request larger than this is refused (413), not buffered without end. Claude Code's
# first request carries its whole system prompt and tool list, about 100 kB.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    529: "Overloaded",
}


@dataclass(slots=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class BadRequest(Exception):
    pass


@dataclass(slots=True)
class Response:
    """Writes one response. `sse()` sends the headers of an event stream; `event()` one event."""

    writer: asyncio.StreamWriter
    status: int = 0
    streamed: bool = False
    extra_headers: dict[str, str] = field(default_factory=dict)

    async def json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        await self._head(
            status, "application/json", {"content-length": str(len(body)), **(headers or {})}
        )
        self.writer.write(body)
        await self.writer.drain()

    async def sse(self) -> None:
        await self._head(200, "text/event-stream", {"cache-control": "no-cache"})
        self.streamed = True

    async def event(self, data: Any, name: str | None = None) -> None:
        """One SSE event: `event: NAME` when named, then `data: JSON` and a blank line."""
        lines = f"event: {name}\n" if name else ""
        lines += f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
        self.writer.write(lines.encode())
        await self.writer.drain()

    async def _head(self, status: int, content_type: str, headers: dict[str, str]) -> None:
        self.status = status
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
        all_headers = {"content-type": content_type, "connection": "close", **headers}
        all_headers.update(self.extra_headers)
        head += [f"{k}: {v}" for k, v in all_headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await self.writer.drain()


Handler = Callable[[Request, Response], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Reads one request; None when the peer closed before sending one."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError as e:
        raise BadRequest("request head too large") from e
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError as e:
        raise BadRequest(f"bad request line {lines[0]!r}") from e
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await _read_body(reader, headers)
    return Request(method, target, headers, _decode_body(body, headers))


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            total += size
            if total > MAX_BODY_BYTES:
                raise BadRequest("request body too large")
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers expected
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0"))
    if length > MAX_BODY_BYTES:
        raise BadRequest("request body too large")
    return await reader.readexactly(length) if length else b""


def _decode_body(body: bytes, headers: dict[str, str]) -> bytes:
    encoding = headers.get("content-encoding", "").lower()
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding in ("", "identity"):
        return body
    raise BadRequest(f"unsupported request content-encoding {encoding!r}")


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
) -> None:
    """One request, one response, then close (see the module docstring)."""
    response = Response(writer)
    try:
        try:
            request = await read_request(reader)
        except (BadRequest, ValueError) as e:
            await response.json(400, {"error": {"message": str(e)}})
            return
        if request is not None:
            await handler(request, response)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the client went away (a canceled turn cuts its stream): nothing to answer
    except asyncio.CancelledError:
        # The server is stopping. End normally: asyncio's stream callback would otherwise log
        # the cancelled connection task as an error (Python 3.11).
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
