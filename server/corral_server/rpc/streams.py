"""What the daemon holds for its streaming calls: per stream, in total, and how many streams.

A server-streaming handler's `yield` returns once grpc has written the message within the
client's HTTP/2 flow-control window (measured: 65 messages of 1 kB complete at once against a
client that never reads, the 64 KiB default window; one of 70 kB never does). Until then grpc
holds the message twice, our bytes and its own copy. So what a stream pins for a client that
stopped reading is the one batch it was last handed, and this module bounds that:

- per stream, a credit: the most bytes its next batch may hold (a batch of one event may
  exceed it). It starts at `first_batch_bytes` and doubles with each batch of at least half
  the credit that the client took, up to the hub's batch size: a reader earns big batches by
  reading, a client that never reads holds a small one.
- in total, `total_bytes` handed to grpc and written less than SLOW_S ago ("active"), over
  every stream: a stream whose next batch would cross it waits (its subscription falls back
  to catching up from the ring or the log meanwhile: that costs nothing per event). A write
  pending longer than SLOW_S is slow: it leaves the active total for the slow one, so clients
  that stopped reading cannot keep readers waiting for longer.
- a batch larger than the first credit for a stream that has not shown it reads (its credit
  never grew) also waits while active and slow together would pass twice `total_bytes`: a
  flood of new streams that never read holds at most that, plus one small batch each.
  Waiting streams are served in order, those that have shown they read first, so readers
  keep going however many clients stopped reading.
- a stream whose write has not completed (or has waited for room) for `stall_s` is stalled:
  `on_stall` ends its subscription (what it had not taken is dropped) and the call ends with
  that once the client reads again. Its pending batch stays counted, as slow: grpc holds it
  until the client reads or its connection closes (keepalive closes one that reads nothing).
- at most `max_streams` streams are open at once; one more is refused with STREAM_LIMIT.

Must not: block a single writer (the hub never waits on a stream), or wait on the event loop for
anything but room in the budget.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from corral_server.clock import Clock, SystemClock, TimerHandle
from corral_server.errors import StreamLimit

log = logging.getLogger(__name__)

# 16 KiB: a client that never reads pins 2 x 16 KiB per stream (2,000 of them: 64 MB), and a
# reader's batches reach the hub's 1 MiB after 6 reads.
FIRST_BATCH_BYTES = 16 << 10
# A write this old is slow: the client is not reading it (a reader's write completes within
# milliseconds; a phone on a poor link within a second or so).
SLOW_S = 1.0


@dataclass(frozen=True, slots=True)
class StreamLimits:
    max_streams: int = 4_096
    first_batch_bytes: int = FIRST_BATCH_BYTES
    # Bytes handed to grpc and not yet written, over every stream (resident: about twice).
    total_bytes: int = 32 << 20
    stall_s: float = 30.0

    def __post_init__(self) -> None:
        if min(self.max_streams, self.first_batch_bytes, self.total_bytes) < 1:
            raise ValueError("stream limits must be positive")
        if self.stall_s <= 0:
            raise ValueError("stall_s must be positive")


class Stream:
    """One open streaming call's writes: `await write(size)` before handing grpc a batch of
    `size` bytes (False: the stream stalled while it waited; drop the batch), `written()` once
    the yield returned; `close()` when the call ends."""

    __slots__ = (
        "_book",
        "_on_stall",
        "credit",
        "pending",
        "since_ms",
        "slow",
        "stalled",
        "waiter",
        "wanted",
    )

    def __init__(self, book: StreamBook, credit: int, on_stall: Callable[[], None]) -> None:
        self._book = book
        self._on_stall = on_stall
        # The most bytes the next batch may hold (see the module docstring).
        self.credit = credit
        # Bytes handed to grpc and not yet written (0 between writes), counted in the book's
        # slow total once `slow`, else in its active one; since `since_ms`.
        self.pending = 0
        self.slow = False
        self.since_ms = 0
        # While waiting for room: the bytes asked for, and the future the book resolves (True:
        # granted, False: stalled meanwhile).
        self.wanted = 0
        self.waiter: asyncio.Future[bool] | None = None
        # Set once a write (or a wait for room) lasted stall_s; the call ends after it.
        self.stalled = False

    async def write(self, size: int) -> bool:
        return await self._book.write(self, size)

    def written(self, max_credit: int) -> int:
        """The write completed; returns the credit for the next batch."""
        size = self.pending
        self._book.release(self)
        if size * 2 >= self.credit and not self.stalled:
            self.credit = min(max_credit, self.credit * 2)
        return self.credit

    def stall(self) -> None:
        if not self.stalled:
            self.stalled = True
            self._on_stall()

    def close(self) -> None:
        self._book.close(self)


class StreamBook:
    """Every open stream, the bytes they have handed grpc (active and slow), the writes
    waiting for room, and the sweep that finds slow and stalled streams."""

    def __init__(self, limits: StreamLimits | None = None, clock: Clock | None = None) -> None:
        self.limits = limits or StreamLimits()
        self._clock: Clock = clock or SystemClock()
        self._streams: dict[Stream, None] = {}
        # Streams with a write pending or waiting: what the sweep looks at.
        self._watched: dict[Stream, None] = {}
        self.active_bytes = 0
        self.slow_bytes = 0
        # Writes waiting for room, in order: of streams that have shown they read, of the
        # others' small batches, of the others' large ones (see the module docstring).
        self._readers: collections.deque[Stream] = collections.deque()
        self._small: collections.deque[Stream] = collections.deque()
        self._large: collections.deque[Stream] = collections.deque()
        self._sweep: TimerHandle | None = None
        self.stalls = 0  # streams ended as stalled (metrics, tests)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def open(self, on_stall: Callable[[], None]) -> Stream:
        limits = self.limits
        if len(self._streams) >= limits.max_streams:
            raise StreamLimit(
                f"the daemon has {limits.max_streams} streams open, its limit (--max-streams); "
                "close one or retry later",
                metadata={"max_streams": str(limits.max_streams)},
            )
        stream = Stream(self, limits.first_batch_bytes, on_stall)
        self._streams[stream] = None
        return stream

    def close(self, stream: Stream) -> None:
        if stream not in self._streams:
            return
        del self._streams[stream]
        self._watched.pop(stream, None)
        if stream.waiter is not None:
            self._drop_waiter(stream, False)
        self.release(stream)  # the call ended mid-write (its client went away), or nothing

    # --- the budget -------------------------------------------------------------------------

    async def write(self, stream: Stream, size: int) -> bool:
        """Count `size` bytes for `stream` once they fit (see the module docstring; at once
        when nothing is active: a batch larger than the whole budget still goes, alone)."""
        stream.since_ms = self._clock.now_ms()
        self._watch(stream)
        queue = self._queue_for(stream, size)
        if stream.stalled:  # what is left is its StreamEnding: it goes, counted as slow
            stream.slow = True
            self.slow_bytes += size
        elif not queue and self._fits(size, queue is self._large):
            stream.slow = False
            self.active_bytes += size
        else:
            waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            stream.wanted, stream.waiter = size, waiter
            queue.append(stream)
            try:
                granted = await waiter
            except asyncio.CancelledError:
                if stream.waiter is waiter:
                    self._drop_waiter(stream, False)
                elif waiter.done() and not waiter.cancelled() and waiter.result():
                    stream.pending = size
                    self.release(stream)  # granted, then the call went away
                raise
            if not granted:
                return False
            stream.since_ms = self._clock.now_ms()
            self._watch(stream)  # a sweep may have run between the grant and now
        stream.pending = size
        return True

    def _queue_for(self, stream: Stream, size: int) -> collections.deque[Stream]:
        first = self.limits.first_batch_bytes
        if stream.credit > first:  # it has taken a batch of at least half its credit
            return self._readers
        return self._small if size <= first else self._large

    def _fits(self, size: int, capped: bool) -> bool:
        total = self.limits.total_bytes
        active = self.active_bytes
        if active and active + size > total:
            return False
        if not capped:
            return True
        held = active + self.slow_bytes
        return not held or held + size <= 2 * total

    def release(self, stream: Stream) -> None:
        size, stream.pending = stream.pending, 0
        if stream.slow:
            self.slow_bytes -= size
        else:
            self.active_bytes -= size
        stream.slow = False
        self._grant()

    def _grant(self) -> None:
        for queue in (self._readers, self._small, self._large):
            capped = queue is self._large
            while queue:
                stream = queue[0]
                if not self._fits(stream.wanted, capped):
                    break
                queue.popleft()
                self.active_bytes += stream.wanted
                stream.slow = False
                self._resolve(stream, True)

    def _drop_waiter(self, stream: Stream, granted: bool) -> None:
        for queue in (self._readers, self._small, self._large):
            with contextlib.suppress(ValueError):  # not queued here
                queue.remove(stream)
        self._resolve(stream, granted)
        self._grant()

    @staticmethod
    def _resolve(stream: Stream, granted: bool) -> None:
        waiter, stream.waiter, stream.wanted = stream.waiter, None, 0
        if waiter is not None and not waiter.done():
            waiter.set_result(granted)

    # --- slow and stalled streams ---------------------------------------------------------

    def _watch(self, stream: Stream) -> None:
        self._watched[stream] = None
        if self._sweep is None:
            self._sweep = self._clock.call_later(self._sweep_s(), self._sweep_streams)

    def _sweep_s(self) -> float:
        return min(SLOW_S, self.limits.stall_s) / 2

    def _sweep_streams(self) -> None:
        """Every half SLOW_S (or half stall_s, if shorter) while writes are pending or
        waiting: a write pending for SLOW_S becomes slow; a stream whose write has been
        pending, or waiting for room, for stall_s is stalled."""
        self._sweep = None
        now = self._clock.now_ms()
        slow_ms, stall_ms = SLOW_S * 1000, self.limits.stall_s * 1000
        stalls = self.stalls
        for stream in list(self._watched):
            age = now - stream.since_ms
            if stream.pending and not stream.slow and age >= slow_ms:
                stream.slow = True
                self.active_bytes -= stream.pending
                self.slow_bytes += stream.pending
                self._grant()
            if not stream.pending and stream.waiter is None:
                del self._watched[stream]
            elif age >= stall_ms and not stream.stalled:
                self.stalls += 1
                stream.stall()
                if stream.waiter is not None:
                    self._drop_waiter(stream, False)
        if self.stalls > stalls:
            log.info(
                "ended %d streams whose clients did not read for %gs (%d so far)",
                self.stalls - stalls,
                self.limits.stall_s,
                self.stalls,
            )
        if self._watched:
            self._sweep = self._clock.call_later(self._sweep_s(), self._sweep_streams)
