"""A raw HTTP/2 gRPC client (the `h2` package) that opens Subscribe streams and does not read
them: it never grants flow-control window, so the daemon's writes to those streams stop once
the 64 KiB default window is used, as they would for a client that stopped reading. Later it
may `read_all`: grant window and collect what each stream carries, up to its trailers.

Used by the memory-bound tests and by bench/memory_hostile.py.
"""

from __future__ import annotations

import socket
import struct
import time
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

    def __init__(self, address: str, streams: int, request: bytes | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        body = request if request is not None else event_pb.SubscribeRequest().SerializeToString()
        message = b"\x00" + struct.pack(">I", len(body)) + body
        self.results: dict[int, StreamResult] = {}
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
                ],
            )
            self.conn.send_data(stream_id, message, end_stream=True)
            self.results[stream_id] = StreamResult()
        self.sock.sendall(self.conn.data_to_send())

    def read_all(self, until_s: float, wanted: set[int] | None = None) -> dict[int, StreamResult]:
        """Read, granting window for everything received, until every stream in `wanted`
        (default: all) has ended or `until_s` seconds have passed."""
        wanted = set(self.results) if wanted is None else wanted
        deadline = time.monotonic() + until_s
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline and not all(self.results[s].ended for s in wanted):
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                break
            for event in self.conn.receive_data(chunk):
                self._on(event)
            self.sock.sendall(self.conn.data_to_send())
        return self.results

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            self.results[event.stream_id].data += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
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
