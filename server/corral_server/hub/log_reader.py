"""Reads the durable event log for subscribers catching up from it (resumes after a restart,
laggards that fell out of the ring): framed, in chunks shared by every subscriber.

Owns the chunks: the log read in aligned stretches of CHUNK_EVENTS revisions (at most
CHUNK_BYTES of events each; the log keeps each event framed, as the ring does), each as
spans of SPAN_EVENTS events whose frames the store joined (records/store.py `LogSpan`: no
work per event here or in the reader thread), the last few kept. A burst of resumes after a
restart reads each stretch once for all subscribers; a read in flight is shared, not
repeated; and the stretches after the one a subscriber starts are read ahead, so the store's
reader thread works while subscribers send.

Must not: publish, touch a subscription, or hold more than CACHED_CHUNKS chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
from bisect import bisect_right
from collections import OrderedDict

from corral_server.hub.span_batches import drop_through
from corral_server.records.store import EventLog, LogSpan

CHUNK_EVENTS = 2048
CHUNK_BYTES = 1 << 20
CACHED_CHUNKS = 16
# Stretches read ahead of the one a subscriber reads: the reader thread works on the next
# while the loop sends this one, with one more in hand for when a read runs slow.
READ_AHEAD_CHUNKS = 2
# Events per span: a batch of 512 events joins 8 spans; a cut inside one splits at most 64.
# The SQLite log stores runs of as many, aligned the same way, so after a burst a span is one
# stored row (tests/unit/store/test_event_runs.py keeps the two equal).
SPAN_EVENTS = 64


def _last(chunk: list[LogSpan]) -> int:
    """The revision of a chunk's last event."""
    span = chunk[-1]
    return span.first + span.events - 1


def _first(span: LogSpan) -> int:
    return span.first


class LogReader:
    def __init__(self, log: EventLog) -> None:
        self._log = log
        # Start revision (entries are after it) -> framed entries, oldest first; LRU.
        self._chunks: OrderedDict[int, list[LogSpan]] = OrderedDict()
        self._reading: dict[int, asyncio.Future[list[LogSpan]]] = {}
        self._ahead: set[asyncio.Task[None]] = set()

    async def after(self, position: int) -> list[LogSpan]:
        """Retained events after `position` as spans (a list of the caller's own), oldest
        first, contiguous, at least one when the log retains one (empty otherwise); a first
        other than `position + 1` means the log no longer retains it."""
        start = position - position % CHUNK_EVENTS
        chunk = await self._chunk(start)
        if chunk and chunk[0].first == start + 1 and _last(chunk) > position:
            self._read_ahead(chunk)
            spans = chunk[bisect_right(chunk, position + 1, key=_first) - 1 :]
            drop_through(spans, position)
            return spans
        if start == position:
            return list(chunk)  # the log's answer for this very position
        # The aligned chunk ended early (by bytes) or is gone: read from the position itself.
        chunk = await self._chunk(position)
        self._read_ahead(chunk)
        return list(chunk)

    async def _chunk(self, start: int) -> list[LogSpan]:
        chunk = self._chunks.get(start)
        if chunk is not None:
            self._chunks.move_to_end(start)
            return chunk
        reading = self._reading.get(start)
        if reading is not None:
            return await asyncio.shield(reading)
        future: asyncio.Future[list[LogSpan]] = asyncio.get_running_loop().create_future()
        self._reading[start] = future
        try:
            chunk = await self._log.read_spans(start, CHUNK_EVENTS, CHUNK_BYTES, SPAN_EVENTS)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the readers that share it get it raised
            raise
        finally:
            del self._reading[start]
        if chunk and chunk[0].first == start + 1:  # only what is still retained is kept
            self._chunks[start] = chunk
            while len(self._chunks) > CACHED_CHUNKS:
                self._chunks.popitem(last=False)
        future.set_result(chunk)
        return chunk

    def _read_ahead(self, chunk: list[LogSpan]) -> None:
        """Start reading the stretches after `chunk` when it ended on a chunk boundary."""
        if not chunk or _last(chunk) % CHUNK_EVENTS:
            return
        for ahead in range(READ_AHEAD_CHUNKS):
            start = _last(chunk) + ahead * CHUNK_EVENTS
            if start >= self._log.head_revision:
                return
            if start in self._chunks or start in self._reading:
                continue
            task = asyncio.ensure_future(self._read_quietly(start))
            self._ahead.add(task)
            task.add_done_callback(self._ahead.discard)

    async def _read_quietly(self, start: int) -> None:
        # A failure here is met again, and reported, by the subscriber that needs the chunk.
        with contextlib.suppress(Exception):
            await self._chunk(start)

    def close(self) -> None:
        """Stop reading ahead (the hub is ending)."""
        for task in self._ahead:
            task.cancel()
