"""The hub's durable half: numbers events, appends them to the event log, and hands them back
in revision order once they are committed (durable first: nothing is published before).

The log keeps each event as its frame (`ring.frame_with_revision`: what a SubscribeResponse
carries), made once here: the ring and the live subscribers take it as it is, and a
subscriber catching up from the log sends what it reads without framing anything.

Owns the revision counter while a durable log is attached, the events numbered but not yet
committed, and what happens when a commit fails: nothing is published and nothing is dropped.
The log fails the failed batch and every append queued behind it and goes back to
`head_revision + 1`; the writer stalls (later events are numbered and kept, not appended),
then after a back-off on the clock appends everything it keeps again, in order, under the
same revisions. So a full disk delays publication, and clients never see a gap, a renumbered
event or an event the log lost. Each failure is logged.

Must not: publish (the hub does, in `on_durable`), block, or raise into a writer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from itertools import chain, repeat
from operator import itemgetter

from corral_server.clock import Clock, TimerHandle
from corral_server.hub.ring import frame_with_revision, reframe
from corral_server.records.store import EventLog, LogEntry

log = logging.getLogger(__name__)

# Back-off between attempts after a failed commit: doubles from the first to the last.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 5.0

# LogEntry's own __new__ is a Python function; one entry is built per published event.
_new_entry = tuple.__new__
_AGENT, _BODY = itemgetter(0), itemgetter(1)


class LogWriter:
    def __init__(
        self,
        event_log: EventLog,
        clock: Clock,
        on_durable: Callable[[list[LogEntry]], None],
    ) -> None:
        """`on_durable(entries)` is called on the loop with committed entries (their events
        framed), in revision order, each once: a batch at a time (one commit's worth, or
        less)."""
        self._log = event_log
        self._clock = clock
        self._on_durable = on_durable
        self.next_revision = event_log.next_revision
        # Numbered and not yet committed, in revision order (first: head_revision + 1), a
        # batch (an `append`) at a time, each entry with its ticket: the revision it was first
        # given (`append`'s answer), which stays when a retry renumbers it, so `discard` finds
        # it. Batches, not entries: a commit publishes whole batches with no work per event.
        self._pending: deque[list[LogEntry]] = deque()
        self._tickets: deque[Sequence[int]] = deque()  # one per batch: its entries' tickets
        self._next_ticket = self.next_revision
        # A failed commit: appends wait for `_retry`. Each stall starts a new generation, so
        # callbacks of appends made before it are recognised and ignored.
        self._stalled = False
        self._generation = 0
        self._delay_s = RETRY_FIRST_S
        self._timer: TimerHandle | None = None
        self.failures = 0
        # Ticket ranges never to publish: dropped, and the rest renumbered, when the stalled
        # writer appends again.
        self._discarded: list[tuple[int, int]] = []

    @property
    def pending(self) -> int:
        """Events numbered and not yet committed."""
        return sum(map(len, self._pending))

    def append(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Number `items` ((agent id, body) each) from `next_revision` and append them; the
        last one's ticket: its revision, unless a failed commit renumbers it later (never
        once published). Never raises."""
        revision, ticket, count = self.next_revision, self._next_ticket, len(items)
        if not count:
            return ticket - 1
        # Built by C iterators: the frame is the only Python call per event.
        revisions = range(revision, revision + count)
        frames = map(frame_with_revision, revisions, map(_BODY, items))
        batch = list(
            map(
                _new_entry,
                repeat(LogEntry),
                zip(revisions, map(_AGENT, items), frames, strict=True),
            )
        )
        self.next_revision = revision + count
        self._next_ticket = ticket + count
        self._pending.append(batch)
        self._tickets.append(range(ticket, ticket + count))
        if not self._stalled:
            self._send(batch)
        return self._next_ticket - 1

    def _send(self, batch: list[LogEntry]) -> None:
        if self._log.next_revision != batch[0].revision:
            # The log went back to its head: a failure whose callback has not run yet.
            self._stall(None)
            return
        future = self._log.append_many(batch)
        future.add_done_callback(partial(self._committed, self._generation))

    def _committed(self, generation: int, future: asyncio.Future[None]) -> None:
        failure = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if failure is None:
            self._delay_s = RETRY_FIRST_S
            self._publish_committed()
        elif generation == self._generation:  # else: `_retry` appends those entries again
            self._stall(failure)

    def _publish_committed(self) -> None:
        """Hand every kept entry the log has committed to `on_durable`, in order."""
        head = self._log.head_revision
        pending, tickets = self._pending, self._tickets
        batches: list[list[LogEntry]] = []
        while pending and pending[0][0].revision <= head:
            batch = pending[0]
            if batch[-1].revision <= head:
                batches.append(pending.popleft())
                tickets.popleft()
                continue
            cut = head - batch[0].revision + 1  # part of one: a retry resent it with others
            batches.append(batch[:cut])
            pending[0], tickets[0] = batch[cut:], tickets[0][cut:]
            break
        if batches:
            self._on_durable(batches[0] if len(batches) == 1 else list(chain(*batches)))

    def _stall(self, failure: BaseException | None) -> None:
        if self._stalled:
            return
        self._stalled = True
        self._generation += 1
        self.failures += 1
        log.error(
            "the event log could not commit (%s); %d events wait, retrying in %.2fs",
            failure or "a commit failed",
            self.pending,
            self._delay_s,
        )
        self._timer = self._clock.call_later(self._delay_s, self._retry)
        self._delay_s = min(self._delay_s * 2, RETRY_MAX_S)

    def discard(self, first: int, last: int) -> None:
        """Drop the events of tickets first..last. Only after a failed commit (theirs, or one
        before them): they are then kept but not committed, and the writer is stalled or is
        about to learn of the failure, so nothing was published after them yet."""
        self._discarded.append((first, last))
        self._stall(None)

    def _renumber(self) -> None:
        """Drop the discarded events and number the rest contiguously from the first kept."""
        discarded, self._discarded = self._discarded, []
        if not self._pending:
            return
        revision = self._pending[0][0].revision
        kept: list[LogEntry] = []
        kept_tickets: list[int] = []
        for ticket, entry in zip(chain(*self._tickets), chain(*self._pending), strict=True):
            if any(first <= ticket <= last for first, last in discarded):
                continue
            kept.append(LogEntry(revision, entry.agent_id, reframe(entry.event, revision)))
            kept_tickets.append(ticket)
            revision += 1
        self._pending = deque([kept] if kept else [])
        self._tickets = deque([kept_tickets] if kept else [])
        self.next_revision = revision

    def _retry(self) -> None:
        self._timer = None
        self._stalled = False
        self._publish_committed()
        if self._discarded:
            self._renumber()
        if self._pending:
            self._send(list(chain(*self._pending)))

    def cancel(self) -> None:
        """Stop retrying (the daemon is stopping); what waits is not published."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
