"""Catch-up batches cut from spans of the durable log (records/store.py `LogSpan`: consecutive
events, their frames joined), without splitting a span into events where it is taken whole.

A subscriber catching up from the log holds the spans after its position (its read-ahead).
A step takes the longest run of matching events that fits the batch's bounds, as take_batch
does over ring entries: whole spans are joined as they are; a span is split into its frames
only where a bound, the scan's end or a mixed-agent span for a scoped subscriber cuts it.
So a step over spans of one agent (or any step of an unscoped subscriber) costs a few
joins, not work per event.

Must not: touch a subscription (catch_up.py applies what a step returns).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from corral_server.hub.ring import frame_ends
from corral_server.records.store import LogSpan


class Taken(NamedTuple):
    """One step's batch: its frames joined, the revision of its last event (0: none), and
    the position the subscriber reaches (every matching event up to it was taken)."""

    data: bytes
    last: int
    position: int


class _Batch:
    """The batch a step is filling: its frames, events, bytes and last revision."""

    __slots__ = ("events", "last", "max_bytes", "parts", "room", "size")

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.parts: list[bytes] = []
        self.events = self.size = self.last = 0
        self.room = max_events
        self.max_bytes = max_bytes

    def add(self, frames: bytes, count: int, last: int) -> None:
        self.parts.append(frames)
        self.events += count
        self.room -= count
        self.size += len(frames)
        self.last = last

    def fits(self, count: int, size: int) -> bool:
        return count <= self.room and self.size + size <= self.max_bytes


def take_spans(
    spans: list[LogSpan],
    position: int,
    scan_end: int,
    scope: frozenset[str],
    max_events: int,
    max_bytes: int,
) -> Taken:
    """The matching events of `spans` (contiguous from `position + 1`) up to revision
    `scan_end`: at most `max_events` of them and `max_bytes` of frames (one at least).
    A batch that fills ends the position at its last event; otherwise at what was scanned."""
    batch = _Batch(max_events, max_bytes)
    upto = position
    full = False
    for first, count, frames, agents in spans:
        if first > scan_end or full:
            break
        scanned = min(count, scan_end - first + 1)
        if not isinstance(agents, str):
            full = _take_mixed(batch, first, frames, agents[:scanned], scope)
        elif scope and agents not in scope:
            pass  # none of it matches
        elif scanned == count and batch.fits(count, len(frames)):
            batch.add(frames, count, first + count - 1)
            full = not batch.room
        else:
            full = _take_part(batch, first, frames, scanned)
        upto = first + scanned - 1
    return Taken(b"".join(batch.parts), batch.last, batch.last if full else upto)


def _take_part(batch: _Batch, first: int, frames: bytes, scanned: int) -> bool:
    """The longest prefix of a span's first `scanned` events (all matching) that fits;
    whether the batch filled before their end."""
    ends = frame_ends(frames)
    fit = bisect_right(ends, batch.max_bytes - batch.size, 0, min(scanned, batch.room))
    if not fit and not batch.events:
        fit = 1  # a batch always holds one event, whatever its size
    if fit:
        batch.add(frames[: ends[fit - 1]], fit, first + fit - 1)
    return fit < scanned or not batch.room


def _take_mixed(
    batch: _Batch, first: int, frames: bytes, agents: tuple[str, ...], scope: frozenset[str]
) -> bool:
    """The matching events among a span's first `len(agents)` events, one by one; whether
    the batch filled."""
    start = 0
    for index, end in enumerate(frame_ends(frames)[: len(agents)]):
        if not scope or agents[index] in scope:
            if not batch.room or (batch.events and not batch.fits(1, end - start)):
                return True
            batch.add(frames[start:end], 1, first + index)
        start = end
    return not batch.room


def drop_through(spans: list[LogSpan], position: int) -> None:
    """Drop the events up to `position` from the front of `spans` (splitting the span that
    `position` falls in)."""
    gone = 0
    for first, count, _, _ in spans:
        if first + count - 1 > position:
            break
        gone += 1
    del spans[:gone]
    if spans and spans[0].first <= position:
        first, count, frames, agents = spans[0]
        cut = position - first + 1
        rest = frames[frame_ends(frames)[cut - 1] :]
        spans[0] = LogSpan(
            position + 1, count - cut, rest, agents if isinstance(agents, str) else agents[cut:]
        )
