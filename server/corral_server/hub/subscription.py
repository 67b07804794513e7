"""One subscriber of the event hub: its state, and the async iterator its consumer reads.

A subscription is plain state, in exactly one of three states (etcd's synced / unsynced /
victim, renamed):

    LIVE         in the live index (index.py); each matching event published is appended to
                 its buffer (fanout.py: never blocks, never waits for this reader), and the
                 reader takes the buffer once the hub has released it (pacing.py: under load
                 releases are paced, so that each stream write carries many events)
    CATCHING_UP  out of the live index; its reader replays the ring after `position` (or the
                 durable log, where the ring no longer reaches) in bounded batches, and rejoins
                 the index when it reaches the head, or is reset with a new snapshot when no
                 store holds what follows its position (catch_up.py)
    ENDED        out of the live index; what it was already given drains (ending with a
                 StreamEnding frame when the hub ended it), then iteration stops (delivery.py)

The hub's parts write its fields, each field by the parts named beside it; this module
writes none of them but its reader's `waiter`. Its consumer face asks its `Feed` (the hub's
delivery part) for each batch, and waits, costing nothing, on a future the hub resolves.
Everything runs on one event loop, so a transition and the work that goes with it happen
without an await in between.
Each item the iterator yields is one framed batch: the payload of one SubscribeResponse.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Protocol, TypeAlias

from corral_server.domain.agent import Agent
from corral_server.domain.events import Event, StreamControl
from corral_server.hub.ring import Entry
from corral_server.records.store import LogSpan

SnapshotFn: TypeAlias = Callable[[frozenset[str]], Sequence[Agent]]
"""The current agents in a scope (empty scope = every agent); called synchronously."""


class FromLog(enum.Enum):
    """What a catch-up step returns when its events are in the durable log, not the ring."""

    FROM_LOG = "from_log"


FROM_LOG = FromLog.FROM_LOG


class SubscriptionState(enum.Enum):
    LIVE = "live"
    CATCHING_UP = "catching_up"
    ENDED = "ended"


class Feed(Protocol):
    """What a subscription's consumer asks of the hub (delivery.py implements it)."""

    def next_batch(self, sub: Subscription) -> bytes | FromLog | None:
        """The next batch ready now; b"" after a catch-up step that sent nothing; FROM_LOG
        when the next step reads the durable log; None: nothing until publish or the end."""
        ...

    async def next_batch_from_log(self, sub: Subscription) -> bytes:
        """The catch-up step that `next_batch` answered FROM_LOG for."""
        ...

    def close(self, sub: Subscription) -> None:
        """Drop what `sub` was not given and forget it: out of every index, ENDED."""
        ...


class Subscription:
    """An async iterator of framed batches (bytes). Close it, or use it as an async context
    manager; the hub wakes it through a future, so a waiting reader costs nothing.

    Users of a subscription read `state`, `delivered_revision` and `buffered_events`; the rpc
    edge sets `batch_bytes`. The other public fields belong to the hub's package (fan-out
    appends to `buffer` in its hot loop, without a call).
    """

    __slots__ = (
        "_closed",
        "_feed",
        "ahead",
        "batch_bytes",
        "buffer",
        "delivered",
        "ending",
        "held",
        "owed",
        "position",
        "prefix",
        "released",
        "scope",
        "snapshot",
        "state",
        "synced_at",
        "waiter",
    )

    def __init__(
        self, feed: Feed, scope: frozenset[str], snapshot: SnapshotFn, batch_bytes: int
    ) -> None:
        self._feed = feed
        # Who writes each field is in brackets; everything runs on the hub's event loop.
        # Agent ids this subscription sees; empty = every agent. [nobody: fixed]
        self.scope = scope
        self.snapshot = snapshot
        # [catch_up: LIVE and CATCHING_UP; delivery: ENDED]
        self.state = SubscriptionState.LIVE
        # Snapshot entries and controls (encoded with revision 0, lazily, batch by batch), sent
        # before anything in `buffer`; None once exhausted. [catch_up sets; delivery takes]
        self.prefix: Iterator[Event | StreamControl] | None = None
        # A prefix entry already encoded that did not fit in the last batch: the next one
        # starts with it (so a batch crosses batch_bytes only when one entry does).
        # [delivery; catch_up clears it with a new prefix]
        self.held: bytes | None = None
        # The most bytes of frames one batch of this subscription holds (a batch of one event
        # may exceed it). The hub's batch_bytes unless its rpc stream lowers it: what a
        # client that stops reading leaves pending in the transport is one batch. [rpc edge]
        self.batch_bytes = batch_bytes
        # In revision order, at most the hub's buffer_events entries.
        # LIVE: every matching event published since the subscription (re)joined the live index
        #   that the reader has not taken yet.
        # CATCHING_UP / ENDED: leftovers from LIVE, all with revision <= `position`
        #   (CATCHING_UP) or <= the StreamEnding's resume revision (ENDED).
        # [fanout appends; delivery takes; catch_up drops it when it demotes]
        self.buffer: list[Entry] = []
        # In the fan-out's list of subscriptions owed a release, so it is listed once however
        # many events it was handed. [fanout]
        self.owed = False
        # LIVE: the hub released this buffer since the reader last emptied it, so the reader
        # may take it now. CATCHING_UP and ENDED readers take their buffer regardless.
        # [fanout sets; delivery clears when it empties the buffer; catch_up when it demotes]
        self.released = False
        # CATCHING_UP: every matching event with revision <= position has been taken by the
        # reader or is in `buffer`, and none with a greater revision has. [catch_up]
        self.position = 0
        # A resumed subscription owes Synced(revision=synced_at) right after its replay
        # reaches synced_at (the head when it subscribed). Only set while CATCHING_UP.
        # [catch_up]
        self.synced_at: int | None = None
        # CATCHING_UP from the durable log: spans read and not yet sent, contiguous from
        # position + 1 (empty otherwise). [catch_up; delivery drops it at an end]
        self.ahead: list[LogSpan] = []
        # ENDED by the hub: the StreamEnding frame, sent once `prefix` and `buffer` drain.
        # [delivery]
        self.ending: bytes | None = None
        # The revision of the last hub event this subscription yielded (0 before any).
        # [delivery for a buffer it takes, catch_up for a step it sends]
        self.delivered = 0
        # Set while the reader waits for publish; `wake` resolves it and clears it. [this]
        self.waiter: asyncio.Future[None] | None = None
        self._closed = asyncio.Event()

    # --- what tests and the rpc edge can observe ------------------------------------------

    @property
    def delivered_revision(self) -> int:
        """The revision of the last hub event yielded to the consumer (0 before any)."""
        return self.delivered

    @property
    def buffered_events(self) -> int:
        return len(self.buffer)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # --- iteration ------------------------------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> bytes:
        feed = self._feed
        while True:
            batch = feed.next_batch(self)
            if batch is FROM_LOG:
                batch = await feed.next_batch_from_log(self)
            if batch:
                return batch
            if batch is not None:
                # A catch-up step scanned a stretch with nothing for this scope, or reset the
                # subscription: let other tasks run before the next bounded step.
                await asyncio.sleep(0)
            elif self.state is SubscriptionState.ENDED:
                self.close()
                raise StopAsyncIteration
            else:
                await self._wait_for_publish()

    def ready(self) -> bytes | FromLog | None:
        """The next batch if one is ready now, without waiting (see `Feed.next_batch`). For
        tests (tests/support/hub.py reads a subscription with it, step by step); consumers
        iterate."""
        return self._feed.next_batch(self)

    async def _wait_for_publish(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiter = waiter
        try:
            await waiter
        finally:
            self.waiter = None

    def wake(self) -> None:
        """Resolve the reader's wait, if it waits (the hub calls this after a transition or a
        release)."""
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        """Stop now: drop anything undelivered and leave the hub. Idempotent."""
        if self._closed.is_set():
            return
        self._feed.close(self)
        self._closed.set()
        self.wake()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
