"""The server-wide event hub behind EventService.Subscribe: its front door.

Owns: the server-wide revision (strictly increasing from 1, one per published event), the
event log's incarnation (the identity its revisions belong to), and the ring of recently
published events (each encoded and framed once for all subscribers). Its parts own the rest:

    index.py     every open subscription, and the live ones by scope (etcd's watcher groups)
    fanout.py    hands published events to live subscriptions; paced releases (pacing.py)
    catch_up.py  the transitions into and out of the live index, and the catch-up steps
                 (ring -> durable log -> live; log_reader.py reads the log)
    delivery.py  the reader's next batch (the `Feed` a Subscription reads), and the end
    log_writer.py  numbering and publication after the durable log's commit

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

import asyncio
import secrets
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import NamedTuple, TypeAlias, cast

from corral_server.clock import Clock, SystemClock
from corral_server.domain.events import Event, RowAppended
from corral_server.domain.timeline import TimelineRow
from corral_server.errors import ShuttingDown
from corral_server.hub.catch_up import CatchUp
from corral_server.hub.delivery import Delivery
from corral_server.hub.fanout import Fanout
from corral_server.hub.index import SubscriptionIndex
from corral_server.hub.log_writer import LogWriter
from corral_server.hub.ring import Encoder, Entry, Ring, StreamFormat, frame_with_revision
from corral_server.hub.subscription import SnapshotFn, Subscription
from corral_server.records.store import EventLog, LogEntry
from corral_server.timeline.store import NewRow


class Prepared(NamedTuple):
    """An event encoded by `EventHub.prepare` and not yet numbered: `body` is the serialized
    corral.v1.Event without its revision (a NamedTuple: one per stored row, hot path)."""

    agent_id: str
    body: bytes


RowsEncoder: TypeAlias = Callable[
    [str, str, int, Sequence[NewRow]], tuple[list[bytes], list[bytes]]
]
"""(agent id, epoch, first seq, rows) -> each row's RowAppended event encoded without its
revision (what `Encoder` makes of it with revision 0), and each row's item as the timeline
store's codec encodes it: every item encoded once for both (the rpc edge passes one)."""


def new_incarnation() -> str:
    """A fresh event-log identity: 128 random bits as 32 hex characters."""
    return secrets.token_hex(16)


# Prepared's own __new__ is a Python function; building the tuple directly is ~3x cheaper
# (measured with timeit: ~150 ns vs ~220 ns), and prepare runs once per stored row.
_new_prepared = tuple.__new__

# The ring's default byte budget: frames of the retained events (a typical row frames to
# 100-300 bytes, so 100,000 events fit many times over; a burst of large rows evicts by bytes).
RETAIN_BYTES = 256 << 20


class EventHub:
    """The one hub of a daemon. Its constructor's arguments: the ring keeps the last
    `retain_events` events and at most `retain_bytes` of their frames (None: no byte bound).
    `batch_bytes` bounds a batch's size: no batch exceeds it unless it is one event that alone
    does (rows are capped well below grpc's default 4 MiB receive limit); `batch_events`
    bounds its event count; `buffer_events` a live subscription's buffer. `incarnation` is the
    event log's identity: None mints a new one (a new, empty log); a log restored from storage
    passes its own. `writes_per_s` paces live streams (pacing.py): under load the hub releases
    buffered events about that many times a second in total over all live subscribers; None
    releases at every commit. `clock` times the pacing.

    `log`: the durable event log. Then the incarnation and revisions are the log's (the ring
    starts empty at its head), every event is published only once the log has committed it
    (log_writer.py), and a subscriber whose position left the ring catches up from the log
    while the log still retains it. `joint_commits`: the log commits in the same journal as
    the timeline store, behind what was handed to the store before (store/commits.py):
    timeline writers may then hand a row's event over with the row. `log_clock` times the retries
    after a failed commit (default: `clock`). `encode_rows`: encodes a batch of rows' events
    and items at once (`prepare_rows`); None: each row's event through `encode`."""

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
        encode_rows: RowsEncoder | None = None,
    ) -> None:
        if min(buffer_events, batch_events, batch_bytes) < 1:
            raise ValueError("buffer_events, batch_events and batch_bytes must be positive")
        self._encode = encode
        self._encode_rows = encode_rows
        # Revisions are comparable only within one incarnation: a resume point from another
        # one is answered with a reset, never replayed against this log.
        if log is not None:
            incarnation = log.incarnation
        self.incarnation = new_incarnation() if incarnation is None else incarnation
        clock = clock or SystemClock()
        self._writer = None if log is None else LogWriter(log, log_clock or clock, self._durable)
        self.joint_commits = joint_commits and log is not None
        self.batch_bytes = batch_bytes
        self._ring = Ring(retain_events, retain_bytes, 0 if log is None else log.head_revision)
        self._index = SubscriptionIndex()
        form = StreamFormat(encode, batch_events, self.incarnation)
        self._catch_up = CatchUp(self._ring, self._index, form, log)
        self._delivery = Delivery(self._index, self._catch_up, form)
        self._fanout = Fanout(
            self._index,
            self._ring,
            self._catch_up.demote,
            buffer_events=buffer_events,
            writes_per_s=writes_per_s,
            clock=clock,
        )
        # The fan-out's entry point, bound once: it runs once per commit.
        self._dispatch = self._fanout.dispatch
        # Set by end_all: no new subscriptions.
        self._ending_reason: str | None = None
        # (revision, future) of `head_reached`; while any waits, every dispatch checks them.
        self._head_waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def head_revision(self) -> int:
        return self._ring.head

    def head_reached(self, revision: int) -> asyncio.Future[None]:
        """Resolves once the head is at `revision` or past it (a cluster node that has not
        yet applied what a client saw elsewhere, docs/cluster.md#read-model). Costs nothing
        per event while nobody waits."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._ring.head >= revision:
            future.set_result(None)
            return future
        self._head_waiters.append((revision, future))
        self._dispatch = self._dispatch_and_wake
        return future

    def _dispatch_and_wake(self, entries: list[Entry]) -> None:
        self._fanout.dispatch(entries)
        head = self._ring.head
        waiting = []
        for revision, future in self._head_waiters:
            if future.done():
                continue  # its caller stopped waiting
            if head >= revision:
                future.set_result(None)
            else:
                waiting.append((revision, future))
        self._head_waiters = waiting
        if not waiting:
            self._dispatch = self._fanout.dispatch

    @property
    def earliest_resumable_revision(self) -> int:
        """The oldest resume point replayable without a reset (from the ring or the log)."""
        return self._catch_up.earliest_resumable

    @property
    def log_writer(self) -> LogWriter | None:
        return self._writer

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._index.open)

    # --- publishing -----------------------------------------------------------------------

    # A timeline writer encodes before it stores and publishes after
    # (docs/design.md#durability): `prepare` is the only step that can fail (an event the
    # encoder refuses), and it runs before anything is stored; `commit` cannot fail, so a
    # stored event is always published.

    def prepare(self, event: Event) -> Prepared:
        """Encode `event` now, without a revision. Raises whatever the encoder raises."""
        return _new_prepared(Prepared, (event.agent_id, self._encode(0, event)))

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]:
        """`prepare` of each row's RowAppended (the rows numbered from `first_seq`), and each
        row's item encoded as the timeline store's codec would (the same bytes, made once),
        or None when this hub has no rows encoder. Raises whatever the encoder raises."""
        if self._encode_rows is None:
            prepare = self.prepare
            events = [
                prepare(RowAppended(agent_id, epoch, TimelineRow(first_seq + i, t, item, turn, pm)))
                for i, (item, t, turn, pm, _) in enumerate(rows)
            ]
            return events, None
        bodies, items = self._encode_rows(agent_id, epoch, first_seq, rows)
        # Plain (agent id, body) pairs, built in C: a Prepared is a tuple of the same shape.
        return cast("list[Prepared]", list(zip(repeat(agent_id), bodies, strict=False))), items

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
        """`commit(prepare(event))`, for a caller with nothing to store between the two (one
        call fewer and no Prepared: the difference was measurable per row)."""
        if self._writer is not None:
            return self._writer.append(((event.agent_id, self._encode(0, event)),))
        return self._append(event.agent_id, self._encode(0, event))

    def discard(self, first: int, last: int) -> None:
        """Never publish the events numbered first..last (their rows failed to commit, and
        so did they: the log retries the others under new revisions, with no gap)."""
        if self._writer is not None:
            self._writer.discard(first, last)

    def _durable(self, committed: list[LogEntry]) -> None:
        """The log committed these (in revision order, right after the ring's head): retain
        and hand them to the live subscribers as one batch."""
        # A LogEntry is an Entry: (revision, agent id, frame).
        entries = cast("list[Entry]", committed)
        self._ring.extend(entries)
        self._dispatch(entries)

    def _append(self, agent_id: str, body: bytes) -> int:
        ring = self._ring
        revision = ring.head + 1
        entry = (revision, agent_id, frame_with_revision(revision, body))
        ring.append(entry)
        self._dispatch([entry])
        return revision

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
        sub = Subscription(self._delivery, agent_ids, snapshot, self.batch_bytes)
        self._index.add(sub)
        self._catch_up.start(sub, resume_revision, resume_incarnation)
        return sub

    def end_all(self, reason: str) -> None:
        """Drain: every subscription gets StreamEnding after what it was already given, then
        stops; later subscribe calls raise ShuttingDown."""
        self._ending_reason = reason
        self._fanout.cancel()
        if self._writer is not None:
            self._writer.cancel()
        self._catch_up.close()
        head = self._ring.head
        for sub in self._index.open:
            self._delivery.end(sub, reason, head, drain=True)

    def end_one(self, sub: Subscription, reason: str) -> None:
        """End `sub` now, without draining (its client stopped reading): what its reader has
        not taken is dropped, and its stream ends with StreamEnding naming the revision up to
        which it was given every matching event, or 0 when part of its snapshot was dropped
        (a resume from 0 replays or resets: it never skips an event)."""
        self._delivery.end(sub, reason, self._ring.head, drain=False)
