"""One agent's timeline as its actor writes it: provider fragments in, whole rows out.

Owns the path of a row (docs/design.md#durability, #coalescing): the provider boundary (text that
cannot be encoded is mended; a row without a turn id takes the running turn's), the coalescer
and its 60 ms timer, and append's order: encode every event first (`Publisher.prepare_rows`, the
only step that may fail on content), store, then publish (`Publisher.commit_many`, which
cannot fail). So a row is stored only if it will be published, and published only once stored.

Must not: be called from anywhere but its actor's queue (it is the single writer's half that
touches the timeline), or change the agent's snapshot (the actor owns it).
"""

from __future__ import annotations

import asyncio
from asyncio import CancelledError
from collections.abc import Callable, Sequence
from typing import Protocol

from corral_server.clock import Clock, TimerHandle
from corral_server.domain import events as ev
from corral_server.hub import Prepared
from corral_server.manager.coalescer import WINDOW_MS, Coalescer
from corral_server.manager.sanitize import sanitize_item, sanitize_text
from corral_server.providers.base import ProviderItem
from corral_server.timeline.store import NewRow, TimelineStore


class Publisher(Protocol):
    """The event hub as the timeline writer sees it: encode first, publish after the store step.

    `joint_commits`: the hub publishes an event only once its event log committed it, in
    the same journal as the timeline store and behind the rows handed over before it
    (store/commits.py), so a row's event may be handed over with the row: it can never be
    published before the row is durable. Then `discard` drops events whose rows failed to
    commit (by the revisions they were given), before the hub retries the log."""

    @property
    def joint_commits(self) -> bool: ...

    def discard(self, first: int, last: int) -> None: ...

    def prepare(self, event: ev.Event) -> Prepared: ...

    def prepare_rows(
        self, agent_id: str, epoch: str, first_seq: int, rows: Sequence[NewRow]
    ) -> tuple[list[Prepared], list[bytes] | None]: ...

    def commit(self, prepared: Prepared) -> int: ...

    def commit_many(self, prepared: Sequence[Prepared]) -> int: ...

    def publish(self, event: ev.Event) -> int: ...


class TimelineWriter:
    def __init__(
        self,
        agent_id: str,
        epoch: str,
        next_seq: int,
        *,
        timeline: TimelineStore,
        publisher: Publisher,
        clock: Clock,
        on_window: Callable[[], None],
    ) -> None:
        """`on_window` is called (from the clock) when a pending row's window has passed:
        the actor queues a `flush`."""
        self._agent_id = agent_id
        self._epoch = epoch
        # The seq the next stored row gets: the single writer knows it before the store does.
        # The seq after the last row published: what readers (snapshots) may promise, so a
        # subscriber never waits for a seq that is still being stored.
        self.next_seq = next_seq
        # The seq the next row handed over gets: the single writer knows it before the store
        # commits (ahead of next_seq while rows are being stored).
        self.reserved_seq = next_seq
        self._timeline = timeline
        self._publisher = publisher
        self._clock = clock
        self._on_window = on_window
        self._coalescer = Coalescer()
        self._timer: TimerHandle | None = None
        # The last publication handed over (rows waiting for their commit, or events queued
        # behind them): later publications chain behind it, so subscribers get the actor's
        # order. `_broken`: a commit failed; the next step raises it.
        self._tail: asyncio.Future[None] | None = None
        self._broken: BaseException | None = None

    def admit(self, event: ProviderItem, active_turn_id: str | None) -> ProviderItem:
        """The provider boundary: text that cannot be encoded is mended here, and a row
        without a turn id belongs to the running turn (docs/design.md#turns)."""
        item = sanitize_item(event.item)
        turn_id = event.turn_id or active_turn_id or ""
        if item is event.item and turn_id == event.turn_id:
            return event
        return ProviderItem(turn_id, item, sanitize_text(event.provider_message_id))

    def offer(self, event: ProviderItem) -> tuple[NewRow, ...]:
        """Give an admitted fragment to the coalescer; the rows to append now."""
        offered = self._coalescer.offer(event, self._clock.now_ms())
        if offered.arm_timer and self._timer is None:
            self._timer = self._clock.call_later(WINDOW_MS / 1000, self._window_passed)
        return offered.ready

    def _window_passed(self) -> None:
        self._timer = None
        self._on_window()

    async def flush(self) -> None:
        """Append the pending row, if any."""
        self.cancel_timer()
        row = self._coalescer.flush()
        if row is not None:
            await self.append([row])

    def flush_nowait(self) -> asyncio.Future[None]:
        """Hand the pending row, if any, to the store without waiting for its commit (as
        `append_nowait`: a failed commit breaks the writer). For the window's flush, so the
        actor goes on coalescing the next fragments while the row commits."""
        self.cancel_timer()
        row = self._coalescer.flush()
        if row is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self.append_nowait([row])

    def discard_pending(self) -> None:
        """Drop the pending fragment (it could not be stored: the turn fails instead)."""
        self.cancel_timer()
        self._coalescer = Coalescer()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def append(self, rows: Sequence[NewRow], lead: Sequence[Prepared] = ()) -> None:
        """Store `rows` and publish one RowAppended each, as one batch; returns once they are
        stored and published (raises what the store raised, which is then reported)."""
        try:
            await self.append_nowait(rows, lead)
        except BaseException:
            self._broken = None  # the caller got it
            raise

    def append_nowait(
        self, rows: Sequence[NewRow], lead: Sequence[Prepared] = ()
    ) -> asyncio.Future[None]:
        """Store `rows` and publish them once stored, without waiting: encoded first (may
        raise here), handed to the store (their seqs are taken now), published in the actor's
        order after their commit. The future resolves once they are published. A commit that
        fails publishes nothing and breaks the writer: its next step raises the failure (the
        actor ends the turn as failed) and the seqs go back to the store's. `lead`: events
        published right before the rows, once they are stored (a turn's turn_started)."""
        self._raise_if_broken()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not rows:
            done.set_result(None)
            return done
        agent_id, first = self._agent_id, self.reserved_seq
        # Each item encoded once, for its event and its stored row (when the hub can).
        prepared, items = self._publisher.prepare_rows(agent_id, self._epoch, first, rows)
        stored = self._timeline.append_encoded(agent_id, rows, items)
        self.reserved_seq = first + len(rows)
        if self._publisher.joint_commits:
            events = [*lead, *prepared]
            last = self._publisher.commit_many(events)
            return self._after_store(stored, done, first + len(rows), last - len(events) + 1, last)
        return self._chain(stored, [*lead, *prepared], done, first + len(rows))

    def publish(self, prepared: Sequence[Prepared]) -> None:
        """Publish events in the actor's order: at once, or after rows still being stored."""
        if self._publisher.joint_commits:  # numbered now: the hub publishes in that order
            self._publisher.commit_many(prepared)
            return
        tail = self._tail
        if tail is None or tail.done():
            self._publisher.commit_many(prepared)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chain(None, prepared, done)

    async def barrier(self) -> None:
        """Until everything handed over so far is stored and published (raises a failure)."""
        tail = self._tail
        if tail is not None and not tail.done():
            await asyncio.shield(tail)
        self._raise_if_broken()

    def _chain(
        self,
        stored: asyncio.Future[None] | None,
        prepared: Sequence[Prepared],
        done: asyncio.Future[None],
        published_next: int | None = None,
    ) -> asyncio.Future[None]:
        """Publish `prepared` once `stored` (if any) and the previous publication are done;
        then rows up to `published_next` (when given) are public: `next_seq` moves there."""
        previous, self._tail = self._tail, done
        waits = [f for f in (previous, stored) if f is not None and not f.done()]

        def go(_: object = None) -> None:
            if any(not f.done() for f in (previous, stored) if f is not None):
                return  # the other one is still running; its callback comes back here
            if done.done():
                return
            failure = None
            if stored is not None:
                failure = stored.exception() if not stored.cancelled() else CancelledError()
            if failure is not None:
                self._broken = failure
                self.reserved_seq = self._timeline.head(self._agent_id).next_seq
                done.set_exception(failure)
                done.exception()  # retrieved: the writer raises it at its next step
                return
            if published_next is not None:
                self.next_seq = published_next
            self._publisher.commit_many(prepared)
            done.set_result(None)

        if not waits:
            go()
        for future in waits:
            future.add_done_callback(go)
        return done

    def _after_store(
        self,
        stored: asyncio.Future[None],
        done: asyncio.Future[None],
        published_next: int,
        first_revision: int,
        last_revision: int,
    ) -> asyncio.Future[None]:
        """Joint commits: the rows' events were handed over with them. Once the rows are
        stored, `next_seq` moves; if they failed, their events are discarded, and the writer
        breaks as in `_chain`."""
        self._tail = done

        def settle(_: object) -> None:
            failure = stored.exception() if not stored.cancelled() else CancelledError()
            if failure is not None:
                self._publisher.discard(first_revision, last_revision)
                self._broken = failure
                self.reserved_seq = self._timeline.head(self._agent_id).next_seq
                done.set_exception(failure)
                done.exception()  # retrieved: the writer raises it at its next step
                return
            self.next_seq = max(self.next_seq, published_next)
            done.set_result(None)

        stored.add_done_callback(settle)
        return done

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            failure, self._broken = self._broken, None
            raise failure
