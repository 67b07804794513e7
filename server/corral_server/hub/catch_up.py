"""The hub's catch-up part (etcd's unsynced watchers and their sync): every transition of a
subscription into the live index and out of it other than its end, and the bounded steps by
which a subscription that is behind reaches the head: ring -> durable log -> live.

    subscribe fresh     snapshot + Synced(head) as its prefix, LIVE at once
    subscribe resume r  CATCHING_UP at r (r still retained), else reset
    demote              LIVE -> CATCHING_UP from the first event its reader has not taken
    step                CATCHING_UP: one bounded batch after `position`, from the ring, or
                        from the log once the ring has let its position go (the reader awaits
                        that read), or a reset when neither holds it; LIVE again in the step
                        that reaches the head
    reset               SubscriptionReset + snapshot + Synced(head, reset) as its prefix, LIVE

Owns a subscription's `position`, `synced_at` and `ahead`, sets its prefix and its LIVE and
CATCHING_UP states, and drops its buffer when it demotes it. Every step runs on the
subscription's own reader's time (publishing never waits for it) and scans a bounded
stretch, so one step stays short however far behind or however narrow its scope.
Must not: publish, end a subscription, or take what its reader was handed (delivery.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from operator import itemgetter

from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentUpserted,
    Event,
    StreamControl,
    SubscriptionReset,
    Synced,
)
from corral_server.hub.index import SubscriptionIndex
from corral_server.hub.log_reader import LogReader
from corral_server.hub.ring import Entry, Ring, StreamFormat, take_batch
from corral_server.hub.span_batches import drop_through, take_spans
from corral_server.hub.subscription import FROM_LOG, FromLog, Subscription, SubscriptionState
from corral_server.records.store import EventLog

# A scoped subscriber catching up scans at most this many batches' worth of ring entries per
# step, so one step over other agents' events stays short however narrow its scope.
SCAN_BATCHES_PER_STEP = 8

_BEHIND = "the subscriber fell behind retained history"


class CatchUp:
    def __init__(
        self, ring: Ring, index: SubscriptionIndex, form: StreamFormat, log: EventLog | None
    ) -> None:
        """`log`: the durable event log, read where the ring no longer reaches."""
        self._ring = ring
        self._index = index
        self._form = form
        self._log = log
        self._reader = None if log is None else LogReader(log)

    @property
    def earliest_resumable(self) -> int:
        """The oldest resume point replayable without a reset (from the ring or the log)."""
        ring = self._ring.earliest_resumable
        if self._log is None:
            return ring
        return min(ring, self._log.earliest_revision - 1)

    def close(self) -> None:
        """Stop reading the log ahead (the hub is ending)."""
        if self._reader is not None:
            self._reader.close()

    # --- into the live index, and out ------------------------------------------------------

    def start(self, sub: Subscription, resume: int | None, resume_incarnation: str) -> None:
        """The first transition of a new subscription (see event_hub.py for its stream)."""
        head = self._ring.head
        if resume is None:
            synced = Synced(revision=head, incarnation=self._form.incarnation)
            self._set_prefix(sub, None, synced)
            self._join_live(sub)
        elif resume_incarnation and resume_incarnation != self._form.incarnation:
            self.reset(sub, resume, "resume point is from another incarnation")
        elif self.earliest_resumable <= resume <= head:
            # Replay (r, head], then Synced(head) so the client knows it has caught up;
            # r == head replays nothing and sends Synced at once.
            sub.position = resume
            sub.synced_at = head
            sub.state = SubscriptionState.CATCHING_UP
        elif resume > head:
            self.reset(sub, resume, "resume revision is ahead of this server's head")
        else:
            self.reset(sub, resume, "resume revision is older than retained history")

    def demote(self, sub: Subscription, first_unread: int) -> None:
        """LIVE -> CATCHING_UP from `first_unread`, the first event its reader has not taken:
        it replays the ring, or the log, on its own time. The buffer is dropped: those events
        are in the ring or the log, and a buffer kept for a reader that does not read would
        hold frames the ring has let go."""
        self._index.leave_live(sub)
        sub.position = first_unread - 1
        sub.buffer = []
        sub.released = False
        sub.state = SubscriptionState.CATCHING_UP
        # A reader waiting on an empty buffer (a batch larger than the whole buffer) is owed
        # no release: wake it to catch up.
        sub.wake()

    def reset(self, sub: Subscription, requested: int, reason: str) -> None:
        """SubscriptionReset + a fresh snapshot + Synced(head, reset=True), then live. The
        subscription's buffer is empty here (a fresh one, or a laggard that drained it)."""
        reset = SubscriptionReset(
            requested_revision=requested,
            earliest_revision=self.earliest_resumable,
            reason=reason,
        )
        synced = Synced(self._ring.head, reset=True, incarnation=self._form.incarnation)
        sub.synced_at = None
        self._set_prefix(sub, reset, synced)
        self._join_live(sub)

    def _join_live(self, sub: Subscription) -> None:
        sub.state = SubscriptionState.LIVE
        sub.ahead = []
        self._index.join_live(sub)

    @staticmethod
    def _set_prefix(sub: Subscription, first: SubscriptionReset | None, synced: Synced) -> None:
        """The stream's prefix. The snapshot is taken now; entries are encoded lazily, batch
        by batch, so a large snapshot costs agent references, not frames, while it waits."""
        agents: Sequence[Agent] = sub.snapshot(sub.scope)
        head: list[Event | StreamControl] = [] if first is None else [first]
        upserts: Iterator[Event | StreamControl] = map(AgentUpserted, agents)
        sub.prefix = chain(head, upserts, [synced])
        sub.held = None

    # --- the steps -------------------------------------------------------------------------

    def step(self, sub: Subscription) -> bytes | FromLog:
        """One bounded catch-up step for a CATCHING_UP subscription whose prefix and buffer
        are empty. Returns the next batch, b"" when this step found nothing to send, or
        FROM_LOG when its position has left the ring but not the log: the reader then awaits
        `step_from_log` for this step."""
        ring = self._ring
        # 1. Its position has left the ring: the log fills the gap if it still retains it,
        #    otherwise nothing can, so reset explicitly.
        if sub.position < ring.earliest_resumable:
            if sub.ahead and sub.ahead[0][0] == sub.position + 1:
                return self._from_ahead(sub)
            if self._log is not None and sub.position >= self._log.earliest_revision - 1:
                return FROM_LOG
            self.reset(sub, sub.position, _BEHIND)
            return b""
        # 2. Scan a bounded stretch after its position, stopping at a pending Synced.
        target = ring.head if sub.synced_at is None else sub.synced_at
        upto = min(target, sub.position + self._stretch(sub))
        return self._send(sub, ring.span(sub.position, upto), upto)

    async def step_from_log(self, sub: Subscription) -> bytes:
        """The catch-up step of a subscription whose position left the ring: a chunk of the
        log (log_reader.py: read in the store's reader thread, shared by every subscriber)
        becomes the subscription's read-ahead, then a step over it (later steps take the
        rest of it without reading)."""
        assert self._reader is not None
        position = sub.position
        read = await self._reader.after(position)
        if sub.state is not SubscriptionState.CATCHING_UP or sub.position != position:
            return b""  # closed or ended while the read ran
        if not read or read[0].first != position + 1:
            # The log dropped it meanwhile (retention): nothing can fill the gap.
            self.reset(sub, position, _BEHIND)
            return b""
        sub.ahead = read
        return self._from_ahead(sub)

    def _from_ahead(self, sub: Subscription) -> bytes:
        """A catch-up step over the subscription's read-ahead (spans of the log from its
        position + 1 on, contiguous: span_batches.py); what it sends or scans past leaves
        the read-ahead."""
        ahead = sub.ahead
        target = self._ring.head if sub.synced_at is None else sub.synced_at
        scan_end = min(target, sub.position + self._stretch(sub))
        form = self._form
        taken = take_spans(
            ahead, sub.position, scan_end, sub.scope, form.batch_events, sub.batch_bytes
        )
        sub.position = taken.position
        if taken.last:
            sub.delivered = taken.last
        data = self._finish(sub, taken.data)
        if sub.ahead is ahead:  # not reset or rejoined meanwhile
            drop_through(ahead, sub.position)
        return data

    def _stretch(self, sub: Subscription) -> int:
        return self._form.batch_events * (SCAN_BATCHES_PER_STEP if sub.scope else 1)

    def _send(self, sub: Subscription, entries: list[Entry], upto: int) -> bytes:
        """The rest of a catch-up step over `entries`, the retained events after the
        subscription's position up to `upto`."""
        if sub.scope:
            entries, upto = _matching(entries, sub.scope, self._form.batch_events, upto)
        batch, data = take_batch(entries, self._form.batch_events, sub.batch_bytes)
        # 3. Advance: past everything scanned if all matches fit, else to the last one sent.
        sub.position = upto if len(batch) == len(entries) else batch[-1][0]
        if batch:
            sub.delivered = batch[-1][0]
        return self._finish(sub, data)

    def _finish(self, sub: Subscription, data: bytes) -> bytes:
        """The end of a catch-up step that sends `data` and left the position where it is
        now: Synced, and back to live, when due."""
        # 4. A resumed subscription's replay reached the head it subscribed at: Synced goes
        #    with this batch if it fits, else alone in the next step (position stays put).
        if sub.synced_at is not None and sub.position == sub.synced_at:
            synced = Synced(revision=sub.synced_at, incarnation=self._form.incarnation)
            framed = self._form.control(synced)
            if len(data) + len(framed) <= sub.batch_bytes or not data:
                data += framed
                sub.synced_at = None
        # 5. At the head: rejoin the live index in the same step, so no event falls between.
        if sub.synced_at is None and sub.position == self._ring.head:
            self._join_live(sub)
        return data


_agent_of = itemgetter(1)


def _matching(
    entries: Sequence[Entry], scope: frozenset[str], limit: int, upto: int
) -> tuple[list[Entry], int]:
    """The first `limit` entries of `scope`, and the revision scanned up to: a catch-up step
    never scans past what it can send (a scan of many batches would otherwise be repeated
    from the last one sent, step after step, when most entries match)."""
    head = list(entries[:limit])
    if scope.issuperset(map(_agent_of, head)):  # all match (C speed): the common case
        return head, (head[-1][0] if len(entries) > limit else upto)
    matched: list[Entry] = []
    keep = matched.append
    for entry in entries:
        if entry[1] in scope:
            keep(entry)
            if len(matched) == limit:
                return matched, entry[0]
    return matched, upto
