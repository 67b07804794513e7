"""The hub's durable half: numbers events, appends them to the event log, and hands them back
in revision order once they are committed (durable first: nothing is published before).

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

from corral_server.clock import Clock, TimerHandle
from corral_server.records.store import EventLog, LogEntry

log = logging.getLogger(__name__)

# Back-off between attempts after a failed commit: doubles from the first to the last.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 5.0


class LogWriter:
    def __init__(
        self,
        event_log: EventLog,
        clock: Clock,
        on_durable: Callable[[list[LogEntry]], None],
    ) -> None:
        """`on_durable(entries)` is called on the loop with committed entries, in revision
        order, each once: a batch at a time (one commit's worth, or less)."""
        self._log = event_log
        self._clock = clock
        self._on_durable = on_durable
        self.next_revision = event_log.next_revision
        # Numbered and not yet committed, in revision order (first: head_revision + 1).
        self._pending: deque[LogEntry] = deque()
        # A failed commit: appends wait for `_retry`. Each stall starts a new generation, so
        # callbacks of appends made before it are recognised and ignored.
        self._stalled = False
        self._generation = 0
        self._delay_s = RETRY_FIRST_S
        self._timer: TimerHandle | None = None
        self.failures = 0

    @property
    def pending(self) -> int:
        """Events numbered and not yet committed."""
        return len(self._pending)

    def append(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Number `items` ((agent id, body) each) from `next_revision` and append them; the
        last revision given (`next_revision - 1` when `items` is empty). Never raises."""
        revision = self.next_revision
        batch = [LogEntry(revision + i, agent_id, body) for i, (agent_id, body) in enumerate(items)]
        if not batch:
            return revision - 1
        self.next_revision = revision + len(batch)
        self._pending.extend(batch)
        if not self._stalled:
            self._send(batch)
        return self.next_revision - 1

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
        pending = self._pending
        durable: list[LogEntry] = []
        while pending and pending[0].revision <= head:
            durable.append(pending.popleft())
        if durable:
            self._on_durable(durable)

    def _stall(self, failure: BaseException | None) -> None:
        if self._stalled:
            return
        self._stalled = True
        self._generation += 1
        self.failures += 1
        log.error(
            "the event log could not commit (%s); %d events wait, retrying in %.2fs",
            failure or "a commit failed",
            len(self._pending),
            self._delay_s,
        )
        self._timer = self._clock.call_later(self._delay_s, self._retry)
        self._delay_s = min(self._delay_s * 2, RETRY_MAX_S)

    def _retry(self) -> None:
        self._timer = None
        self._stalled = False
        self._publish_committed()
        if self._pending:
            self._send(list(self._pending))

    def cancel(self) -> None:
        """Stop retrying (the daemon is stopping); what waits is not published."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
