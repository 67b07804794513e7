"""The server-wide event hub behind EventService.Subscribe.

Owns: the server-wide revision (strictly increasing from 1, one per published event), the
event log's incarnation (the identity its revisions belong to), the ring
of recently published events (each encoded and framed once for all subscribers), the live index
of subscribers by scope, and every subscription's transitions between LIVE, CATCHING_UP and
ENDED (see subscription.py for each state's invariant).

Must not: await or block in publish; do work in publish proportional to a subscriber's
backlog (a full buffer demotes the subscriber in O(1), and it catches up from the ring on its
own reader's time, in bounded batches); import protobuf or grpc (the rpc edge passes `encode`).

What a stream carries (control entries and snapshot entries are encoded with revision 0):
  fresh            AgentUpserted per matching agent, Synced(head), then live events > head
  resume r, kept   the matching events > r, Synced(head at subscribe), then live events
  resume r, gone   SubscriptionReset(r, earliest), snapshot, Synced(head, reset=True), live
  resume r, other  the same reset sequence: r names another incarnation of the event log
  laggard gone     the same reset sequence, in-stream, where its replay could not continue
  end_all          whatever it was given, then StreamEnding(resume_revision, reason); stop
Every Synced and StreamEnding carries the incarnation.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from operator import itemgetter
from typing import NamedTuple, TypeVar, assert_never, cast

from corral_server.clock import Clock, SystemClock
from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentUpserted,
    Event,
    StreamControl,
    StreamEnding,
    SubscriptionReset,
    Synced,
)
from corral_server.errors import ShuttingDown
from corral_server.hub.log_reader import LogReader
from corral_server.hub.log_writer import LogWriter
from corral_server.hub.pacing import Pacer
from corral_server.hub.ring import Entry, Ring, frame, frame_with_revision, take_batch
from corral_server.hub.subscription import (
    FROM_LOG,
    FromLog,
    SnapshotFn,
    Subscription,
    SubscriptionState,
)
from corral_server.records.store import EventLog, LogEntry

Encoder = Callable[[int, Event | StreamControl], bytes]
"""(revision, event) -> the serialized corral.v1.Event; revision 0 for snapshot and control."""


class Prepared(NamedTuple):
    """An event encoded by `EventHub.prepare` and not yet numbered: `body` is the serialized
    corral.v1.Event without its revision (a NamedTuple: one per stored row, hot path)."""

    agent_id: str
    body: bytes


def new_incarnation() -> str:
    """A fresh event-log identity: 128 random bits as 32 hex characters."""
    return secrets.token_hex(16)


# Prepared's own __new__ is a Python function; building the tuple directly is ~3x cheaper
# (measured with timeit: ~150 ns vs ~220 ns), and prepare runs once per stored row.
_new_prepared = tuple.__new__

# The ring's default byte budget: frames of the retained events (a typical row frames to
# 100-300 bytes, so 100,000 events fit many times over; a burst of large rows evicts by bytes).
RETAIN_BYTES = 256 << 20

# A scoped subscriber catching up scans at most this many batches' worth of ring entries per
# step, so one step over other agents' events stays short however narrow its scope.
_SCAN_BATCHES_PER_STEP = 8


class EventHub:
    def __init__(
        self,
        encode: Encoder,
        *,
        retain_events: int = 100_000,
        retain_bytes: int | None = RETAIN_BYTES,
        buffer_events: int = 8_192,
        batch_events: int = 512,
        batch_bytes: int = 1 << 20,
        incarnation: str | None = None,
        writes_per_s: int | None = None,
        clock: Clock | None = None,
        log: EventLog | None = None,
        joint_commits: bool = False,
        log_clock: Clock | None = None,
    ) -> None:
        """The ring keeps the last `retain_events` events and at most `retain_bytes` of
        their frames (None: no byte bound). `batch_bytes` bounds a batch's size: no batch
        exceeds it unless it is one event that alone does (rows are capped well below grpc's
        default 4 MiB receive limit); `batch_events` bounds its event count. `incarnation` is
        the event log's identity: None mints a new one (a new, empty log); a log restored from
        storage passes its own. `writes_per_s` paces live streams (pacing.py): under load
        the hub releases buffered events about that many times a second in total over all
        live subscribers; None releases at every commit. `clock` times the pacing.

        `log`: the durable event log. Then the incarnation and revisions are the log's (the
        ring starts empty at its head), every event is published only once the log has
        committed it (log_writer.py), and a subscriber whose position left the ring catches
        up from the log while the log still retains it. `joint_commits`: the log commits in
        the same journal as the timeline store, behind what was handed to the store before
        (store/commits.py): writers may then hand a row's event over with the row. `log_clock`
        times the retries after a failed commit (default: `clock`)."""
        if min(buffer_events, batch_events, batch_bytes) < 1:
            raise ValueError("buffer_events, batch_events and batch_bytes must be positive")
        self.encode = encode
        # Revisions are comparable only within one incarnation: a resume point from another
        # one is answered with a reset, never replayed against this log.
        if log is not None:
            incarnation = log.incarnation
        self.incarnation = new_incarnation() if incarnation is None else incarnation
        self._log = log
        clock = clock or SystemClock()
        retry_clock = log_clock or clock
        self._writer = None if log is None else LogWriter(log, retry_clock, self._durable)
        self._reader = None if log is None else LogReader(log)
        self.joint_commits = joint_commits and log is not None
        self.batch_events = batch_events
        self.batch_bytes = batch_bytes
        self._buffer_events = buffer_events
        self._ring = Ring(retain_events, retain_bytes, 0 if log is None else log.head_revision)
        # LIVE subscriptions given events since the last release (each once, flagged by its
        # `owed`): the release wakes each and lets it take its buffer.
        self._owed: list[Subscription] = []
        self._pacer = Pacer(self._release, writes_per_s, clock)
        # How many subscriptions are LIVE (the pacer shares its budget among them).
        self._live_count = 0
        # Every subscription that is not closed, in any state.
        self._subscriptions: dict[Subscription, None] = {}
        # The live index holds exactly the LIVE subscriptions: an all-agents one in
        # `_live_all`, a scoped one under each of its agent ids (an event has one agent id,
        # so publish meets each subscription at most once per event).
        self._live_all: dict[Subscription, None] = {}
        self._live_by_agent: dict[str, dict[Subscription, None]] = {}
        # Set by end_all: no new subscriptions.
        self._ending_reason: str | None = None

    @property
    def head_revision(self) -> int:
        return self._ring.head

    @property
    def earliest_resumable_revision(self) -> int:
        """The oldest resume point replayable without a reset (from the ring or the log)."""
        ring = self._ring.earliest_resumable
        if self._log is None:
            return ring
        return min(ring, self._log.earliest_revision - 1)

    @property
    def log_writer(self) -> LogWriter | None:
        return self._writer

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._subscriptions)

    # --- the writer -----------------------------------------------------------------------

    # The writer encodes before it stores and publishes after: `prepare` is the only step
    # that can fail (an event the encoder refuses), and it runs before anything is stored;
    # `commit` cannot fail, so a stored event is always published.

    def prepare(self, event: Event) -> Prepared:
        """Encode `event` now, without a revision. Raises whatever the encoder raises."""
        return _new_prepared(Prepared, (event.agent_id, self.encode(0, event)))

    def commit(self, prepared: Prepared) -> int:
        """Number and retain a prepared event, hand it to every matching live subscriber, and
        return its revision. Synchronous, never raises; costs O(matching live subscribers).
        With a durable log: number it and append it to the log; it is retained and handed
        to subscribers once committed."""
        if self._writer is not None:
            return self._writer.append((prepared,))
        return self._append(prepared[0], prepared[1])

    def commit_many(self, prepared: Sequence[Prepared]) -> int:
        """Number and retain `prepared` in order (consecutive revisions) and hand the batch
        to each matching live subscriber at once: one extend and at most one release each, so
        a subscriber costs O(1) per batch rather than per event. Returns the last revision
        (the head when `prepared` is empty). Synchronous, never raises. With a durable log,
        the batch is numbered now and published once committed (see `commit`)."""
        if self._writer is not None:
            return self._writer.append(prepared)
        ring = self._ring
        revision = ring.head
        entries: list[Entry] = []
        retain = ring.append
        keep = entries.append
        for agent_id, body in prepared:
            revision += 1
            entry = (revision, agent_id, frame_with_revision(revision, body))
            retain(entry)
            keep(entry)
        if entries:
            self._dispatch(entries)
        return revision

    def publish(self, event: Event) -> int:
        """`commit(prepare(event))`, for a writer with nothing to store between the two (one
        call fewer and no Prepared: the difference was measurable per row)."""
        if self._writer is not None:
            return self._writer.append(((event.agent_id, self.encode(0, event)),))
        return self._append(event.agent_id, self.encode(0, event))

    def discard(self, first: int, last: int) -> None:
        """Never publish the events numbered first..last (their rows failed to commit, and
        so did they: the log retries the others under new revisions, with no gap)."""
        if self._writer is not None:
            self._writer.discard(first, last)

    def _durable(self, committed: list[LogEntry]) -> None:
        """The log committed these (in revision order, right after the ring's head): retain
        and hand them to the live subscribers as one batch."""
        retain = self._ring.append
        for entry in committed:  # a LogEntry is an Entry: (revision, agent id, frame)
            retain(entry)
        self._dispatch(cast("list[Entry]", committed))

    def _append(self, agent_id: str, body: bytes) -> int:
        ring = self._ring
        revision = ring.head + 1
        entry = (revision, agent_id, frame_with_revision(revision, body))
        ring.append(entry)
        self._dispatch([entry])
        return revision

    def _dispatch(self, entries: list[Entry]) -> None:
        """Hand freshly retained `entries` to the live subscribers they match, then ask the
        pacer for a release."""
        if self._live_all:
            self._hand(self._live_all, entries)
        by_agent = self._live_by_agent
        if by_agent:
            agent_id = entries[0][1]
            if all(entry[1] == agent_id for entry in entries):
                scoped = by_agent.get(agent_id)
                if scoped:
                    self._hand(scoped, entries)
            else:
                for entry in entries:
                    scoped = by_agent.get(entry[1])
                    if scoped:
                        self._hand(scoped, [entry])
        if self._owed:
            self._pacer.request(self._live_count)

    def _hand(self, subs: dict[Subscription, None], entries: list[Entry]) -> None:
        """Append `entries` to each subscriber's buffer and owe it a release; a subscriber
        whose buffer cannot take them all gets none and leaves the live index (O(1), whatever
        its backlog)."""
        limit = self._buffer_events - len(entries)
        owed = self._owed
        laggards: list[Subscription] | None = None
        # The hub's hot loop: the extend is inline because a method call per subscriber per
        # event was measurable (publish at 100 subscribers: ~15 us with a call, ~10 us inline).
        for sub in subs:
            buffer = sub.buffer
            if len(buffer) <= limit:
                buffer.extend(entries)
                if not sub.owed:
                    sub.owed = True
                    owed.append(sub)
            elif laggards is None:
                laggards = [sub]
            else:
                laggards.append(sub)
        for sub in laggards or ():
            # Its buffer holds every matching event before these, which did not fit.
            self._demote(sub, entries[0][0])

    def _demote(self, sub: Subscription, first_new: int) -> None:
        """LIVE -> CATCHING_UP: from the first event its reader has not taken (the first in
        its buffer, else `first_new`) it replays the ring, or the log, on its own time. The
        buffer is dropped: those events are in the ring or the log, and a buffer kept for a
        reader that does not read would hold frames the ring has let go."""
        buffer = sub.buffer
        self._leave_live(sub)
        sub.position = (buffer[0][0] if buffer else first_new) - 1
        sub.buffer = []
        sub.released = False
        sub.set_state(SubscriptionState.CATCHING_UP)
        # A reader waiting on an empty buffer (a batch larger than the whole buffer) is owed
        # no release: wake it to catch up.
        sub.wake()

    def _release(self) -> None:
        """Let every owed subscriber's reader take its buffer, waking it if it waits. A
        subscriber whose oldest buffered event has left the ring is demoted instead (its
        reader is that far behind: its buffer would keep alive what the ring let go)."""
        owed, self._owed = self._owed, []
        first = self._ring.first
        for sub in owed:
            sub.owed = False
            buffer = sub.buffer
            if buffer and buffer[0][0] < first and sub.state is SubscriptionState.LIVE:
                self._demote(sub, buffer[0][0])
                continue
            sub.released = True
            if sub.waiter is not None:
                sub.wake()

    # --- subscribing and ending -----------------------------------------------------------

    def subscribe(
        self,
        agent_ids: frozenset[str],
        resume_revision: int | None,
        snapshot: SnapshotFn,
        *,
        resume_incarnation: str = "",
    ) -> Subscription:
        """A new subscription (see the module docstring for what its stream carries).
        Snapshot and registration happen together, with no await in between.
        `resume_incarnation` names the log `resume_revision` belongs to; "" = this one."""
        if self._ending_reason is not None:
            raise ShuttingDown()
        ring = self._ring
        head = ring.head
        sub = Subscription(self, agent_ids, snapshot)
        self._subscriptions[sub] = None
        if resume_revision is None:
            synced = Synced(revision=head, incarnation=self.incarnation)
            sub.set_prefix(self._snapshot_items(sub, None, synced))
            self._join_live(sub)
        elif resume_incarnation and resume_incarnation != self.incarnation:
            self._reset(sub, resume_revision, "resume point is from another incarnation")
        elif self.earliest_resumable_revision <= resume_revision <= head:
            # Replay (r, head] from the ring, then Synced(head) so the client knows it has
            # caught up; r == head replays nothing and sends Synced at once.
            sub.position = resume_revision
            sub.synced_at = head
            sub.set_state(SubscriptionState.CATCHING_UP)
        elif resume_revision > head:
            self._reset(sub, resume_revision, "resume revision is ahead of this server's head")
        else:
            self._reset(sub, resume_revision, "resume revision is older than retained history")
        return sub

    def end_all(self, reason: str) -> None:
        """Drain: every subscription gets StreamEnding after what it was already given, then
        stops; later subscribe calls raise ShuttingDown."""
        self._ending_reason = reason
        self._pacer.cancel()
        if self._writer is not None:
            self._writer.cancel()
        if self._reader is not None:
            self._reader.close()
        head = self._ring.head
        for sub in self._subscriptions:
            match sub.state:
                case SubscriptionState.LIVE:
                    self._leave_live(sub)
                    resume = head
                case SubscriptionState.CATCHING_UP:
                    resume = sub.position
                case SubscriptionState.ENDED:
                    continue
                case _ as unreachable:
                    assert_never(unreachable)
            ending = StreamEnding(resume, reason, self.incarnation)
            sub.end(frame(self.encode(0, ending)))

    def end_one(self, sub: Subscription, reason: str) -> None:
        """End `sub` now, without draining (its client stopped reading): what its reader has
        not taken is dropped, and its stream ends with StreamEnding naming the revision up to
        which it was given every matching event, or 0 when part of its snapshot was dropped
        (a resume from 0 replays or resets: it never skips an event)."""
        match sub.state:
            case SubscriptionState.LIVE:
                self._leave_live(sub)
                resume = self._ring.head
            case SubscriptionState.CATCHING_UP:
                resume = sub.position
            case SubscriptionState.ENDED:
                return
            case _ as unreachable:
                assert_never(unreachable)
        if sub.buffer:
            resume = sub.buffer[0][0] - 1
        if sub.drop_pending():
            resume = 0
        ending = StreamEnding(resume, reason, self.incarnation)
        sub.end(frame(self.encode(0, ending)))

    # --- the reader side (package-private: called by Subscription) ------------------------

    def _catch_up(self, sub: Subscription) -> bytes | FromLog:
        """One bounded catch-up step for a CATCHING_UP subscription whose prefix and buffer
        are empty. Returns the next batch, b"" when this step found nothing to send, or
        FROM_LOG when its position has left the ring but not the log: the reader then awaits
        `_catch_up_from_log` for this step."""
        ring = self._ring
        # 1. Its position has left the ring: the log fills the gap if it still retains it,
        #    otherwise nothing can, so reset explicitly.
        if sub.position < ring.earliest_resumable:
            if sub.ahead and sub.ahead[0][0] == sub.position + 1:
                return self._from_ahead(sub)
            if self._log is not None and sub.position >= self._log.earliest_revision - 1:
                return FROM_LOG
            self._reset(sub, sub.position, "the subscriber fell behind retained history")
            return b""
        # 2. Scan a bounded stretch after its position, stopping at a pending Synced.
        target = ring.head if sub.synced_at is None else sub.synced_at
        upto = min(target, sub.position + self._stretch(sub))
        return self._send(sub, ring.span(sub.position, upto), upto)

    async def _catch_up_from_log(self, sub: Subscription) -> bytes:
        """The catch-up step of a subscription whose position left the ring: a chunk of the
        log (log_reader.py: read in the store's reader thread, shared by every subscriber)
        becomes the subscription's read-ahead, then a step over it (later steps take the
        rest of it without reading)."""
        assert self._reader is not None
        position = sub.position
        read = await self._reader.after(position)
        if sub.state is not SubscriptionState.CATCHING_UP or sub.position != position:
            return b""  # closed or ended while the read ran
        if not read or read[0][0] != position + 1:
            # The log dropped it meanwhile (retention): nothing can fill the gap.
            self._reset(sub, position, "the subscriber fell behind retained history")
            return b""
        sub.ahead = read
        return self._from_ahead(sub)

    def _from_ahead(self, sub: Subscription) -> bytes:
        """A catch-up step over the subscription's read-ahead (log entries from its
        position + 1 on, contiguous); what it sends or scans past leaves the read-ahead."""
        ahead = sub.ahead
        target = self._ring.head if sub.synced_at is None else sub.synced_at
        scan = ahead[: self._stretch(sub)]
        if scan and scan[-1][0] > target:
            scan = [entry for entry in scan if entry[0] <= target]
        upto = scan[-1][0] if scan else sub.position
        data = self._send(sub, scan, upto)
        if sub.ahead is ahead:  # not reset or rejoined meanwhile
            del ahead[: max(0, sub.position - ahead[0][0] + 1)]
        return data

    def _stretch(self, sub: Subscription) -> int:
        return self.batch_events * (_SCAN_BATCHES_PER_STEP if sub.scope else 1)

    def _send(
        self, sub: Subscription, entries: list[Entry], upto: int, *, scoped: bool = False
    ) -> bytes:
        """The rest of a catch-up step over `entries`, the retained events after the
        subscription's position up to `upto` (`scoped`: already cut to its scope)."""
        ring = self._ring
        if sub.scope and not scoped:
            entries, upto = _matching(entries, sub.scope, self.batch_events, upto)
        batch, data = take_batch(entries, self.batch_events, sub.batch_bytes)
        # 3. Advance: past everything scanned if all matches fit, else to the last one sent.
        sub.position = upto if len(batch) == len(entries) else batch[-1][0]
        if batch:
            sub.note_delivered(batch[-1][0])
        # 4. A resumed subscription's replay reached the head it subscribed at: Synced goes
        #    with this batch if it fits, else alone in the next step (position stays put).
        if sub.synced_at is not None and sub.position == sub.synced_at:
            synced = Synced(revision=sub.synced_at, incarnation=self.incarnation)
            framed = frame(self.encode(0, synced))
            if len(data) + len(framed) <= sub.batch_bytes or not data:
                data += framed
                sub.synced_at = None
        # 5. At the head: rejoin the live index in the same step, so no event falls between.
        if sub.synced_at is None and sub.position == ring.head:
            self._join_live(sub)
        return data

    def _forget(self, sub: Subscription) -> None:
        if sub.state is SubscriptionState.LIVE:
            self._leave_live(sub)
        self._subscriptions.pop(sub, None)

    # --- internals ------------------------------------------------------------------------

    def _reset(self, sub: Subscription, requested: int, reason: str) -> None:
        """SubscriptionReset + a fresh snapshot + Synced(head, reset=True), then live. The
        subscription's buffer is empty here (a fresh one, or a laggard that drained it)."""
        reset = SubscriptionReset(
            requested_revision=requested,
            earliest_revision=self.earliest_resumable_revision,
            reason=reason,
        )
        synced = Synced(self._ring.head, reset=True, incarnation=self.incarnation)
        sub.synced_at = None
        sub.ahead = []
        sub.set_prefix(self._snapshot_items(sub, reset, synced))
        self._join_live(sub)

    @staticmethod
    def _snapshot_items(
        sub: Subscription, first: SubscriptionReset | None, synced: Synced
    ) -> Iterator[Event | StreamControl]:
        """The stream's prefix. The snapshot is taken now; entries are encoded lazily, batch
        by batch, so a large snapshot costs agent references, not frames, while it waits."""
        agents: Sequence[Agent] = sub.snapshot(sub.scope)
        head: list[Event | StreamControl] = [] if first is None else [first]
        upserts: Iterator[Event | StreamControl] = map(AgentUpserted, agents)
        return chain(head, upserts, [synced])

    def _join_live(self, sub: Subscription) -> None:
        sub.set_state(SubscriptionState.LIVE)
        sub.ahead = []
        self._live_count += 1
        if not sub.scope:
            self._live_all[sub] = None
            return
        for agent_id in sub.scope:
            self._live_by_agent.setdefault(agent_id, {})[sub] = None

    def _leave_live(self, sub: Subscription) -> None:
        self._live_count -= 1
        if not sub.scope:
            self._live_all.pop(sub, None)
            return
        for agent_id in sub.scope:
            subs = self._live_by_agent.get(agent_id)
            if subs is not None:
                subs.pop(sub, None)
                if not subs:
                    del self._live_by_agent[agent_id]


_E = TypeVar("_E", Entry, LogEntry)
_agent_of = itemgetter(1)


def _matching(
    entries: Sequence[_E], scope: frozenset[str], limit: int, upto: int
) -> tuple[list[_E], int]:
    """The first `limit` entries of `scope`, and the revision scanned up to: a catch-up step
    never scans past what it can send (a scan of many batches would otherwise be repeated
    from the last one sent, step after step, when most entries match)."""
    head = list(entries[:limit])
    if scope.issuperset(map(_agent_of, head)):  # all match (C speed): the common case
        return head, (head[-1][0] if len(entries) > limit else upto)
    matched: list[_E] = []
    keep = matched.append
    for entry in entries:
        if entry[1] in scope:
            keep(entry)
            if len(matched) == limit:
                return matched, entry[0]
    return matched, upto
