"""Bytes on the wire: the 5-byte envelopes of Connect streaming and gRPC-Web, gRPC-Web's
trailers frame, and the status codes' names and HTTP statuses of the Connect protocol.

An envelope is one flags byte and a 4-byte big-endian length, then that many bytes. Flags:
0x01 compressed, 0x02 Connect's end-stream message (JSON), 0x80 gRPC-Web's trailers (HTTP/1
header lines). Pure functions; no I/O.
"""

from __future__ import annotations

import base64
import struct

import grpc

HEADER = struct.Struct(">BI")
COMPRESSED = 0x01
END_STREAM = 0x02
TRAILERS = 0x80

# Connect's code names (grpc's names in lower case, but "canceled") and the HTTP status a
# unary error answers with (the Connect protocol's table, as amended by its RFC 003).
CONNECT_CODES: dict[grpc.StatusCode, tuple[str, int]] = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}


class EnvelopeError(ValueError):
    """A request body that is not exactly one well-formed envelope."""


def envelope(flags: int, payload: bytes) -> bytes:
    return HEADER.pack(flags, len(payload)) + payload


def single_envelope(body: bytes) -> bytes:
    """The payload of the one uncompressed message a server-streaming or unary request
    carries. Raises EnvelopeError, saying what is wrong."""
    if len(body) < HEADER.size:
        raise EnvelopeError(f"a {len(body)}-byte body is shorter than the 5-byte envelope prefix")
    flags, length = HEADER.unpack_from(body)
    if flags & COMPRESSED:
        raise EnvelopeError("compressed messages are not accepted (send identity encoding)")
    if flags != 0:
        raise EnvelopeError(f"unexpected envelope flags 0x{flags:02x}")
    if len(body) != HEADER.size + length:
        raise EnvelopeError(
            f"the envelope says {length} bytes but {len(body) - HEADER.size} follow it "
            "(exactly one message is expected)"
        )
    return body[HEADER.size :]


def b64_unpadded(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def percent_encode(text: str) -> str:
    """grpc-message's encoding: UTF-8, with bytes outside printable ASCII and '%' escaped."""
    out: list[str] = []
    for byte in text.encode():
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def grpc_web_trailers(code: grpc.StatusCode, message: str, details: bytes | None) -> bytes:
    """The gRPC-Web trailers frame: grpc-status, grpc-message and grpc-status-details-bin."""
    lines = [f"grpc-status:{code.value[0]}"]
    if message:
        lines.append(f"grpc-message:{percent_encode(message)}")
    if details:
        lines.append(f"grpc-status-details-bin:{b64_unpadded(details)}")
    return envelope(TRAILERS, "".join(line + "\r\n" for line in lines).encode())
