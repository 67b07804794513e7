"""A server-sent-events client small enough to count every byte: HTTP/1.1 GET on a raw asyncio
connection, the chunked body decoded as it arrives, the stream cut into events.

`bytes_in` counts the event stream itself (the de-chunked body), the same measure as the
length-prefixed messages counted on a gRPC stream: neither counts its transport's framing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


class ChunkedDecoder:
    """Transfer-Encoding: chunked, decoded incrementally (feed any split of the bytes)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._left = 0  # bytes still due of the current chunk's data
        self._crlf = 0  # bytes still due of the CRLF after a chunk's data
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while self._buffer and not self.done:
            if self._crlf:
                skip = min(self._crlf, len(self._buffer))
                self._buffer, self._crlf = self._buffer[skip:], self._crlf - skip
            elif self._left:
                piece = self._buffer[: self._left]
                out += piece
                self._buffer, self._left = self._buffer[len(piece) :], self._left - len(piece)
                if not self._left:
                    self._crlf = 2
            else:
                line, sep, rest = self._buffer.partition(b"\r\n")
                if not sep:
                    break  # the size line is not whole yet
                size = int(line.split(b";", 1)[0], 16)
                self._buffer = rest
                if size == 0:
                    self.done = True
                self._left = size
        return bytes(out)


@dataclass(slots=True)
class Event:
    data: str
    id: str = ""
    name: str = ""

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """Events out of an event stream (fed in any split): `data:` lines joined by newlines, an
    event ending at a blank line; comments and events without data are dropped."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = Event("")
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[Event]:
        self._buffer += data
        events: list[Event] = []
        while True:
            line, sep, rest = self._buffer.partition(b"\n")
            if not sep:
                return events
            self._buffer = rest
            text = line.rstrip(b"\r").decode()
            if not text:
                if self._data:
                    self._event.data = "\n".join(self._data)
                    events.append(self._event)
                self._event, self._data = Event(""), []
                continue
            name, _, value = text.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                self._data.append(value)
            elif name == "id":
                self._event.id = value
            elif name == "event":
                self._event.name = value


@dataclass(slots=True)
class Stream:
    """One open event stream."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    chunked: bool
    bytes_in: int = 0
    _decoder: ChunkedDecoder = field(default_factory=ChunkedDecoder)
    _parser: SseParser = field(default_factory=SseParser)

    async def events(self) -> list[Event]:
        """The next events (waits for at least one read); [] at the end of the stream."""
        while True:
            data = await self.reader.read(65536)
            if not data:
                return []
            body = self._decoder.feed(data) if self.chunked else data
            self.bytes_in += len(body)
            events = self._parser.feed(body)
            if events:
                return events

    def close(self) -> None:
        self.writer.close()


async def open_stream(port: int, target: str, headers: dict[str, str] | None = None) -> Stream:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        writer.close()
        raise RuntimeError(f"GET {target}: {status.decode()}")
    chunked = b"transfer-encoding: chunked" in head.lower()
    return Stream(reader, writer, chunked)
