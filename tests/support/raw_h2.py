"""A raw HTTP/2 gRPC client (the `h2` package) that opens Subscribe streams and does not read
them: it never grants flow-control window, so the daemon's writes to those streams stop once
the 64 KiB default window is used, as they would for a client that stopped reading. Later it
may `read_all`: grant window and collect what each stream carries, up to its trailers.

Used by the memory-bound tests and by bench/memory_hostile.py.
"""

from __future__ import annotations

import collections
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events

from corral.v1 import event_service_pb2 as event_pb


@dataclass
class StreamResult:
    """What one stream carried: its gRPC messages (SubscribeResponse bytes), its trailers."""

    data: bytearray = field(default_factory=bytearray)
    trailers: dict[str, str] = field(default_factory=dict)
    reset: bool = False

    @property
    def ended(self) -> bool:
        return bool(self.trailers) or self.reset

    def messages(self) -> list[event_pb.SubscribeResponse]:
        out: list[event_pb.SubscribeResponse] = []
        at = 0
        data = bytes(self.data)
        while at + 5 <= len(data):
            (length,) = struct.unpack(">I", data[at + 1 : at + 5])
            if at + 5 + length > len(data):
                break
            out.append(event_pb.SubscribeResponse.FromString(data[at + 5 : at + 5 + length]))
            at += 5 + length
        return out


class NeverReadingClient:
    """One connection with `streams` Subscribe streams (every agent, from now on)."""

    def __init__(
        self,
        address: str,
        streams: int,
        request: bytes | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        body = request if request is not None else event_pb.SubscribeRequest().SerializeToString()
        message = b"\x00" + struct.pack(">I", len(body)) + body
        self.results: dict[int, StreamResult] = {}
        # Received but not yet granted back (receive_without_reading): granted at the next read.
        self.pending_grant: collections.Counter[int] = collections.Counter()
        for _ in range(streams):
            stream_id = self.conn.get_next_available_stream_id()
            self.conn.send_headers(
                stream_id,
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", "/corral.v1.EventService/Subscribe"),
                    (":authority", address),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                    *headers,
                ],
            )
            self.conn.send_data(stream_id, message, end_stream=True)
            self.results[stream_id] = StreamResult()
        self.sock.sendall(self.conn.data_to_send())

    def read_all(self, until_s: float, wanted: set[int] | None = None) -> dict[int, StreamResult]:
        """Read, granting window for everything received, until every stream in `wanted`
        (default: all) has ended or `until_s` seconds have passed."""
        wanted = set(self.results) if wanted is None else wanted
        for stream_id, length in self.pending_grant.items():  # taken in unread: grant it now
            self.conn.acknowledge_received_data(length, stream_id)
        self.pending_grant.clear()
        self.sock.sendall(self.conn.data_to_send())
        self._pump(until_s, lambda: all(self.results[s].ended for s in wanted), grant=True)
        return self.results

    def receive_without_reading(self, stream_id: int, size: int, until_s: float) -> bytes:
        """Take in what the daemon sends without granting window (the client still reads
        nothing, for flow control) until `stream_id` carried `size` bytes or `until_s` passed;
        those bytes. With `size` 65,535 (the default window) the daemon can send no more."""
        result = self.results[stream_id]
        # What it sends back is settings and ping acks only.
        self._pump(until_s, lambda: len(result.data) >= size or result.ended, grant=False)
        return bytes(result.data)

    def _pump(self, until_s: float, done: Callable[[], bool], *, grant: bool) -> None:
        """Receive and answer (granting window for what arrives, with `grant`) until `done()`,
        the daemon closes the connection, or `until_s` seconds have passed."""
        deadline = time.monotonic() + until_s
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline and not done():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                break
            for event in self.conn.receive_data(chunk):
                self._on(event, grant=grant)
            self.sock.sendall(self.conn.data_to_send())

    def _on(self, event: h2.events.Event, grant: bool = True) -> None:
        if isinstance(event, h2.events.DataReceived):
            self.results[event.stream_id].data += event.data
            if grant:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            else:
                self.pending_grant[event.stream_id] += event.flow_controlled_length
        elif isinstance(event, h2.events.ResponseReceived):
            headers = {str(k): str(v) for k, v in event.headers}
            if "grpc-status" in headers:  # a trailers-only answer (a refusal)
                self.results[event.stream_id].trailers = headers
        elif isinstance(event, h2.events.TrailersReceived):
            self.results[event.stream_id].trailers = {str(k): str(v) for k, v in event.headers}
        elif isinstance(event, h2.events.StreamReset):
            self.results[event.stream_id].reset = True

    def close(self) -> None:
        self.sock.close()
