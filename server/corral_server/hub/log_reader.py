"""Reads the durable event log for subscribers catching up from it (resumes after a restart,
laggards that fell out of the ring): framed, in chunks shared by every subscriber.

Owns the chunks: the log read in aligned stretches of CHUNK_EVENTS revisions (at most
CHUNK_BYTES of events each; the log keeps each event framed, as the ring does), the last few
kept. A burst
of resumes after a restart reads and frames each stretch once for all subscribers; a read in
flight is shared, not repeated; and the stretch after the one a subscriber starts is read
ahead, so the store's reader thread works while subscribers send.

Must not: publish, touch a subscription, or hold more than CACHED_CHUNKS chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import cast

from corral_server.hub.ring import Entry
from corral_server.records.store import EventLog

CHUNK_EVENTS = 2048
CHUNK_BYTES = 1 << 20
CACHED_CHUNKS = 16


class LogReader:
    def __init__(self, log: EventLog) -> None:
        self._log = log
        # Start revision (entries are after it) -> framed entries, oldest first; LRU.
        self._chunks: OrderedDict[int, list[Entry]] = OrderedDict()
        self._reading: dict[int, asyncio.Future[list[Entry]]] = {}
        self._ahead: set[asyncio.Task[None]] = set()

    async def after(self, position: int) -> list[Entry]:
        """Retained entries after `position`, oldest first, contiguous, at least one when the
        log retains one (empty otherwise); the first other than `position + 1` means the log
        no longer retains it."""
        start = position - position % CHUNK_EVENTS
        chunk = await self._chunk(start)
        if chunk and chunk[0][0] == start + 1 and chunk[-1][0] > position:
            self._read_ahead(chunk)
            return chunk[position - start :]
        if start == position:
            return chunk  # the log's answer for this very position
        # The aligned chunk ended early (by bytes) or is gone: read from the position itself.
        chunk = await self._chunk(position)
        self._read_ahead(chunk)
        return chunk

    async def _chunk(self, start: int) -> list[Entry]:
        chunk = self._chunks.get(start)
        if chunk is not None:
            self._chunks.move_to_end(start)
            return chunk
        reading = self._reading.get(start)
        if reading is not None:
            return await asyncio.shield(reading)
        future: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
        self._reading[start] = future
        try:
            read = await self._log.read(start, CHUNK_EVENTS, CHUNK_BYTES)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the readers that share it get it raised
            raise
        finally:
            del self._reading[start]
        chunk = cast("list[Entry]", read)  # a LogEntry is an Entry: the log keeps frames
        if chunk and chunk[0][0] == start + 1:  # only what is still retained is kept
            self._chunks[start] = chunk
            while len(self._chunks) > CACHED_CHUNKS:
                self._chunks.popitem(last=False)
        future.set_result(chunk)
        return chunk

    def _read_ahead(self, chunk: list[Entry]) -> None:
        """Start reading the stretch after `chunk` when it ended on a chunk boundary."""
        if not chunk or chunk[-1][0] % CHUNK_EVENTS:
            return
        start = chunk[-1][0]
        if start in self._chunks or start in self._reading or start >= self._log.head_revision:
            return
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
