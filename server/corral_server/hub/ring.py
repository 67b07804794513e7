"""Framed events and the ring that retains the most recent ones by revision.

Owns: the wire framing of one encoded event as an element of `SubscribeResponse.events`, the
ring of the most recent framed events, bounded in events and in bytes (O(1) lookup by
revision), and cutting a run of framed events
into one bounded batch. Must not: know about subscribers, protobuf or grpc — a frame is bytes.

Why framing here: `SubscribeResponse { repeated Event events = 1; }` serialises as, per event,
the tag byte 0x0A + varint(len) + the Event bytes. So a batch response is the concatenation of
its frames, and each event is encoded and framed once for every subscriber.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeAlias

from corral_server.domain.events import Event, StreamControl
from corral_server.varint import SMALL_VARINTS
from corral_server.varint import encode_varint as _varint

Entry: TypeAlias = tuple[int, str, bytes]
"""(revision, agent_id, frame): built once per published event and shared by the ring and
by every subscriber buffer that holds it (a plain tuple: cheapest to build and index)."""

Encoder: TypeAlias = Callable[[int, Event | StreamControl], bytes]
"""(revision, event) -> the serialized corral.v1.Event, the payload of one frame; revision 0
for snapshot and control entries (the rpc edge passes one: the hub never imports protobuf)."""

frame_of = itemgetter(2)

# Field 1 (`events`), wire type 2 (length-delimited).
_EVENTS_TAG = 0x0A


def _header(length: int) -> bytes:
    return bytes((_EVENTS_TAG,)) + _varint(length)


# Headers of the common sizes, precomputed (~150 KB): a lookup and one concatenation per
# event instead of building the varint (measured: ~60 ns vs ~220 ns per frame).
_HEADERS = tuple(_header(length) for length in range(4096))


def frame(payload: bytes) -> bytes:
    """`payload` (one serialized corral.v1.Event) as one element of `SubscribeResponse.events`."""
    length = len(payload)
    if length < 4096:
        return _HEADERS[length] + payload
    return _header(length) + payload


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """What every stream of one hub shares: the encoder, the most events in one batch, and the
    incarnation every Synced and StreamEnding names."""

    encode: Encoder
    batch_events: int
    incarnation: str

    def control(self, item: Event | StreamControl) -> bytes:
        """The frame of a snapshot or control entry (encoded with revision 0)."""
        return frame(self.encode(0, item))


# `Event.revision` is field 1, varint (tag 0x08). Revisions below 2**14 come whole from a
# table; below 2**21 (a busy daemon) as the tag and low 7 bits from one table and the 2-byte
# varint of the rest from another (measured: ~60 ns vs ~200 ns building the bytes).
_VARINTS = SMALL_VARINTS
_REVISION_FIELDS = tuple(b"\x08" + varint for varint in _VARINTS)
_TAG_AND_LOW = tuple(bytes((0x08, low | 0x80)) for low in range(128))


def revision_field(revision: int) -> bytes:
    """`Event.revision = revision` as protobuf writes it (revision >= 1)."""
    if revision < 16384:
        return _REVISION_FIELDS[revision]
    if revision < 2_097_152:
        return _TAG_AND_LOW[revision & 0x7F] + _VARINTS[revision >> 7]
    return b"\x08" + _varint(revision)


def frame_with_revision(revision: int, body: bytes) -> bytes:
    """The frame of `revision_field(revision) + body`, where `body` is an Event encoded with
    revision 0 (so without field 1). protobuf writes fields in number order, so this is
    byte-identical to the frame of the Event encoded with `revision`."""
    # revision_field, inlined: this runs once per published event.
    if revision < 16384:
        head = _REVISION_FIELDS[revision]
    elif revision < 2_097_152:
        head = _TAG_AND_LOW[revision & 0x7F] + _VARINTS[revision >> 7]
    else:
        head = b"\x08" + _varint(revision)
    length = len(head) + len(body)
    if length < 4096:
        return _HEADERS[length] + head + body
    return _header(length) + head + body


def reframe(framed: bytes, revision: int) -> bytes:
    """The frame of the same event under another revision (`framed` as `frame_with_revision`
    made it: the events tag, the length, the revision field, then the body)."""
    at = 1  # the events tag
    while framed[at] & 0x80:  # the length's varint
        at += 1
    at += 2  # its last byte, and the revision field's tag
    while framed[at] & 0x80:  # the revision's varint
        at += 1
    return frame_with_revision(revision, framed[at + 1 :])


def take_batch(
    entries: Sequence[Entry], max_events: int, max_bytes: int
) -> tuple[Sequence[Entry], bytes]:
    """The longest prefix of `entries` with at most `max_events` events whose frames total at
    most `max_bytes` (a firm bound, broken only by a batch of one event that alone exceeds
    it: a batch always holds at least one event), and that prefix's frames joined as one
    SubscribeResponse payload."""
    batch = entries if len(entries) <= max_events else entries[:max_events]
    data = b"".join(map(frame_of, batch))
    if len(data) <= max_bytes or len(batch) <= 1:
        return batch, data
    size = 0
    cut = len(batch)
    for index, entry in enumerate(batch):
        size += len(entry[2])
        if size > max_bytes:
            cut = max(index, 1)
            break
    batch = batch[:cut]
    return batch, b"".join(map(frame_of, batch))


_PLACEHOLDER: Entry = (0, "", b"")


class Ring:
    """The last published events, at most `capacity` of them and at most `max_bytes` of frames
    (the newest event always stays, whatever its size); revision r lives in slot r % capacity.

    Invariant: the slots hold exactly the revisions first .. head (first - 1 == head when
    empty); the other slots hold a placeholder; `size_bytes` is the sum of their frames'
    lengths. A resume point r is servable iff earliest_resumable <= r <= head, because then
    every revision after r is still here.
    """

    __slots__ = ("_capacity", "_max_bytes", "_slots", "first", "head", "size_bytes")

    def __init__(self, capacity: int, max_bytes: int | None = None, head: int = 0) -> None:
        """`head`: the revision the ring starts after (a durable log's head at start-up)."""
        if capacity < 1:
            raise ValueError("the ring must retain at least one event")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("the ring's byte budget must be positive")
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._slots: list[Entry] = [_PLACEHOLDER] * capacity
        # The revision of the newest event (`head` before any), and of the oldest one retained.
        self.head = head
        self.first = head + 1
        self.size_bytes = 0

    @property
    def earliest_resumable(self) -> int:
        return self.first - 1

    def append(self, entry: Entry) -> None:
        """Retain `entry`, whose revision must be head + 1, evicting the oldest events while
        the ring holds more than `capacity` of them or more than `max_bytes` of frames."""
        revision = entry[0]
        slots = self._slots
        index = revision % self._capacity
        if revision - self.first == self._capacity:
            # Full by count: the oldest event lives in this very slot.
            self.size_bytes -= len(slots[index][2])
            self.first += 1
        slots[index] = entry
        self.head = revision
        self.size_bytes += len(entry[2])
        if self._max_bytes is not None and self.size_bytes > self._max_bytes:
            self._evict_bytes(self._max_bytes)

    def extend(self, entries: Sequence[Entry]) -> None:
        """`append` each of `entries` (revisions head + 1, head + 2, ...), in two slice
        assignments and C-level sums instead of a call per entry (a durable commit retains
        thousands at once); the ring ends as the appends would leave it."""
        count, capacity = len(entries), self._capacity
        if count > capacity or count < 2:
            for entry in entries:
                self.append(entry)
            return
        slots = self._slots
        start = entries[0][0] % capacity
        stop = start + count
        # The slots taken hold either a placeholder (b"") or a retained event evicted by
        # count: their frames' bytes leave the ring.
        if stop <= capacity:
            evicted = sum(map(len, map(frame_of, slots[start:stop])))
            slots[start:stop] = entries
        else:
            wrap = stop - capacity
            evicted = sum(map(len, map(frame_of, slots[start:]))) + sum(
                map(len, map(frame_of, slots[:wrap]))
            )
            slots[start:] = entries[: capacity - start]
            slots[:wrap] = entries[capacity - start :]
        self.head = entries[-1][0]
        self.first = max(self.first, self.head - capacity + 1)
        self.size_bytes += sum(map(len, map(frame_of, entries))) - evicted
        if self._max_bytes is not None and self.size_bytes > self._max_bytes:
            self._evict_bytes(self._max_bytes)

    def _evict_bytes(self, max_bytes: int) -> None:
        slots, capacity = self._slots, self._capacity
        while self.size_bytes > max_bytes and self.first < self.head:
            index = self.first % capacity
            self.size_bytes -= len(slots[index][2])
            slots[index] = _PLACEHOLDER
            self.first += 1

    def span(self, after: int, upto: int) -> list[Entry]:
        """The entries with after < revision <= upto, in order (two slices at most).
        Requires earliest_resumable <= after <= upto <= head."""
        count = upto - after
        if count <= 0:
            return []
        start = (after + 1) % self._capacity
        stop = start + count
        if stop <= self._capacity:
            return self._slots[start:stop]
        return self._slots[start:] + self._slots[: stop - self._capacity]


def frame_ends(frames: bytes) -> list[int]:
    """The offset just past each frame of `frames` (frames joined, as a batch is)."""
    ends: list[int] = []
    keep = ends.append
    at, size = 0, len(frames)
    while at < size:
        at += 1  # the events tag
        length = shift = 0
        while True:
            byte = frames[at]
            at += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        at += length
        keep(at)
    return ends
