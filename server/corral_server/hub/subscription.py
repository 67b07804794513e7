"""One subscriber of the event hub: its state, its bounded buffer, and its reader side.

Every subscription is in exactly one state (etcd's synced / unsynced / victim, renamed):

    LIVE         in the hub's live index; publish appends each matching event to its buffer
                 (put_nowait style: never blocks, never waits for this reader), and the
                 reader takes the buffer once the hub has released it (pacing.py: under
                 load, releases are paced so that each stream write carries many events)
    CATCHING_UP  out of the live index; its reader replays the hub's ring after `position` in
                 bounded batches and rejoins the index when it reaches the head, or is reset
                 with a new snapshot when its position has left the ring
    ENDED        out of the live index; what it was already given drains (ending with a
                 StreamEnding frame when the hub ended it), then iteration stops

Each item the iterator yields is one framed batch: the payload of one SubscribeResponse.
Only the hub's publish (while LIVE) and this subscription's own reader touch its fields; both
run on one event loop, so a state change and the work that goes with it happen without an
await in between.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from types import TracebackType
from typing import TYPE_CHECKING, TypeAlias, assert_never

from corral_server.domain.agent import Agent
from corral_server.domain.events import Event, StreamControl
from corral_server.hub.ring import Entry, frame, take_batch

if TYPE_CHECKING:
    from corral_server.hub.event_hub import EventHub

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


class Subscription:
    """An async iterator of framed batches (bytes). Close it, or use it as an async context
    manager; the hub wakes it through a future, so a waiting reader costs nothing.

    The attributes without a leading underscore, other than `scope`, are shared with the
    hub's package (publish appends to `buffer` directly: it is the hub's hot loop); users of
    a subscription read `state`, `delivered_revision` and `buffered_events`.
    """

    __slots__ = (
        "_closed",
        "_delivered",
        "_ending",
        "_held",
        "_hub",
        "_prefix",
        "_state",
        "ahead",
        "batch_bytes",
        "buffer",
        "owed",
        "position",
        "released",
        "scope",
        "snapshot",
        "synced_at",
        "waiter",
    )

    def __init__(self, hub: EventHub, scope: frozenset[str], snapshot: SnapshotFn) -> None:
        self._hub = hub
        # Agent ids this subscription sees; empty = every agent.
        self.scope = scope
        self.snapshot = snapshot
        self._state = SubscriptionState.LIVE
        # Snapshot entries and controls (encoded with revision 0, lazily, batch by batch), sent
        # before anything in `buffer`. None once exhausted.
        self._prefix: Iterator[Event | StreamControl] | None = None
        # A prefix entry already encoded that did not fit in the last batch: the next one
        # starts with it (so a batch crosses the hub's batch_bytes only when one entry does).
        self._held: bytes | None = None
        # The most bytes of frames one batch of this subscription holds (a batch of one event
        # may exceed it). The hub's batch_bytes unless its stream's writer lowers it: what a
        # client that stops reading leaves pending in the transport is one batch.
        self.batch_bytes = hub.batch_bytes
        # In revision order, at most the hub's buffer_events entries.
        # LIVE: every matching event published since the subscription (re)joined the live index
        #   that the reader has not taken yet. Publish appends; only the reader removes.
        # CATCHING_UP / ENDED: leftovers from LIVE, all with revision <= `position`
        #   (CATCHING_UP) or <= the StreamEnding's resume revision (ENDED).
        self.buffer: list[Entry] = []
        # In the hub's list of subscriptions owed a release (set by publish, cleared by the
        # release), so it is listed once however many events it was handed.
        self.owed = False
        # LIVE: the hub released this buffer since the reader last emptied it, so the reader
        # may take it now. CATCHING_UP and ENDED readers take their buffer regardless.
        self.released = False
        # CATCHING_UP: every matching event with revision <= position has been taken by the
        # reader or is in `buffer`, and none with a greater revision has. Unused otherwise.
        self.position = 0
        # A resumed subscription owes Synced(revision=synced_at) right after its replay
        # reaches synced_at (the head when it subscribed). Only set while CATCHING_UP.
        self.synced_at: int | None = None
        # CATCHING_UP from the durable log: entries read and not yet sent, contiguous from
        # position + 1 (empty otherwise).
        self.ahead: list[Entry] = []
        # ENDED by the hub: the StreamEnding frame, sent once `_prefix` and `buffer` drain.
        self._ending: bytes | None = None
        # Set while the reader waits for publish; publish resolves it and clears it.
        self.waiter: asyncio.Future[None] | None = None
        # The revision of the last hub event this subscription yielded (0 before any).
        self._delivered = 0
        self._closed = asyncio.Event()

    # --- what tests and the rpc edge can observe ------------------------------------------

    @property
    def state(self) -> SubscriptionState:
        return self._state

    @property
    def delivered_revision(self) -> int:
        """The revision of the last hub event yielded to the consumer (0 before any)."""
        return self._delivered

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
        while True:
            batch = self._next_batch()
            if batch is FROM_LOG:
                batch = await self._hub._catch_up_from_log(self)
            if batch:
                return batch
            if batch is not None:
                # A catch-up step scanned a stretch with nothing for this scope, or reset the
                # subscription: let other tasks run before the next bounded step.
                await asyncio.sleep(0)
            elif self._state is SubscriptionState.ENDED:
                self.close()
                raise StopAsyncIteration
            else:
                await self._wait_for_publish()

    def poll(self) -> bytes | None:
        """The next batch if one is ready now, without waiting; None when nothing is (or the
        subscription has ended, and then it is closed). Catch-up steps run back to back here,
        without yielding; a step that must read the durable log is not ready (None)."""
        while True:
            batch = self._next_batch()
            if batch is FROM_LOG:
                return None
            if batch is None and self._state is SubscriptionState.ENDED:
                self.close()
            if batch != b"":
                return batch

    def _next_batch(self) -> bytes | FromLog | None:
        """The next batch that is ready now, b"" when a catch-up step made progress without
        one, FROM_LOG when the next step reads the durable log, or None when there is
        nothing to do until publish (or the end)."""
        if self._prefix is not None:
            data = self._take_prefix(self._prefix)
            if data:
                return data
            self._prefix = None
        if self.buffer and (self.released or self._state is not SubscriptionState.LIVE):
            return self._take_buffer()
        match self._state:
            case SubscriptionState.LIVE:
                return None
            case SubscriptionState.CATCHING_UP:
                return self._hub._catch_up(self)
            case SubscriptionState.ENDED:
                ending, self._ending = self._ending, None
                return ending
            case _ as unreachable:
                assert_never(unreachable)

    def _take_prefix(self, prefix: Iterator[Event | StreamControl]) -> bytes:
        hub = self._hub
        held, self._held = self._held, None
        frames: list[bytes] = [] if held is None else [held]
        size = 0 if held is None else len(held)
        for item in islice(prefix, hub.batch_events - len(frames)):
            framed = frame(hub.encode(0, item))
            if frames and size + len(framed) > self.batch_bytes:
                self._held = framed
                break
            frames.append(framed)
            size += len(framed)
        return b"".join(frames)

    def _take_buffer(self) -> bytes:
        buffer = self.buffer
        batch, data = take_batch(buffer, self._hub.batch_events, self.batch_bytes)
        if len(batch) == len(buffer):
            self.buffer = []
            self.released = False
        else:
            del buffer[: len(batch)]
        self._delivered = batch[-1][0]
        return data

    async def _wait_for_publish(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiter = waiter
        try:
            await waiter
        finally:
            self.waiter = None

    # --- transitions (called by the hub, or by close) --------------------------------------

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def set_prefix(self, items: Iterator[Event | StreamControl]) -> None:
        self._prefix = items
        self._held = None

    def set_state(self, state: SubscriptionState) -> None:
        self._state = state

    def drop_pending(self) -> bool:
        """Drop what the reader has not taken yet (prefix, buffer, read-ahead), for an end
        that does not drain; True when part of the prefix was dropped."""
        # An exhausted prefix stays set until the reader's next step: look for one more item.
        prefix = self._prefix
        dropped_prefix = self._held is not None or (
            prefix is not None and next(prefix, None) is not None
        )
        self._prefix = None
        self._held = None
        self.buffer = []
        self.released = False
        self.ahead = []
        return dropped_prefix

    def end(self, ending: bytes) -> None:
        """The hub ended this subscription: drain what it was given, then send `ending`."""
        self._state = SubscriptionState.ENDED
        self._ending = ending
        self.wake()

    def note_delivered(self, revision: int) -> None:
        self._delivered = revision

    def close(self) -> None:
        """Stop now: drop anything undelivered and leave the hub. Idempotent."""
        if self._closed.is_set():
            return
        self._hub._forget(self)
        self._state = SubscriptionState.ENDED
        self._prefix = None
        self._held = None
        self.buffer = []
        self._ending = None
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
