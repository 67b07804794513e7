"""What the record modules share: parsing a blob, stored enum numbers, times, usage."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message
from google.protobuf.timestamp_pb2 import Timestamp

from corral.storage.v1 import records_pb2 as pb
from corral_server.domain.agent import Usage

M = TypeVar("M", bound=Message)
T = TypeVar("T")


def parse(kind: type[M], data: bytes, noun: str) -> M:
    """The record in `data`; ValueError when it is not one (the store reports it as bad)."""
    try:
        return kind.FromString(data)
    except DecodeError as exc:
        raise ValueError(f"not an encoded {noun}: {exc}") from exc


def known(values: dict[Any, T], number: int, record: str, what: str) -> T:
    """The domain value a stored enum number stands for; ValueError for one it does not know
    (0 among them: a value the record always has)."""
    try:
        return values[number]
    except KeyError:
        raise ValueError(f"a {record} with an unknown {what} ({number})") from None


def usage_record(u: Usage) -> pb.Usage:
    return pb.Usage(**asdict(u))


_USAGE_FIELDS = tuple(f.name for f in fields(Usage))
_NO_USAGE = Usage()


def usage(stored: pb.Usage) -> Usage:
    """Start-up decodes one per stored agent: the names are read once, and a usage of all
    zeros (most agents') is the one shared `Usage()` (it is frozen)."""
    values = [getattr(stored, name) for name in _USAGE_FIELDS]
    return Usage(*values) if any(values) else _NO_USAGE


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000
