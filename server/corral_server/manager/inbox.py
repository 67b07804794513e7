"""The provider-event inbox of one agent's actor: events a provider session reports wait here,
and one job on the actor's queue drains them all, in order, in one batch.

A session's sink may report many events between two runs of the actor's task (a burst of
fragments); queueing a job per event would cost a job each. Instead the first event posts one
drain, the rest join it. Rows that are ready together are appended in one batch (one store
write, then one publish per row); every other event is handled on its own, after the rows
before it.

Must not: judge a turn or change the agent itself (the handler, the actor, does both).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from corral_server.domain.timeline import UserMessage
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import ProviderEvent, ProviderItem
from corral_server.timeline.store import NewRow


class InboxHandler(Protocol):
    """What the drain asks of the actor, on the actor's queue."""

    @property
    def writer(self) -> TimelineWriter: ...

    def takes_rows(self) -> bool:
        """Whether the agent still takes rows (not closed, not stopped)."""

    def history_row(self, event: ProviderItem) -> NewRow:
        """A replayed item's row."""

    def fragment_rows(self, event: ProviderItem) -> tuple[NewRow, ...]:
        """The rows an accepted fragment makes ready now (none for another turn's)."""

    async def handle(self, event: ProviderEvent) -> None:
        """Any other event, after the rows before it are handed to the timeline store."""


class ProviderInbox:
    def __init__(
        self, handler: InboxHandler, post: Callable[[Callable[[], Awaitable[None]]], None]
    ) -> None:
        self._handler = handler
        self._post = post  # queues a job on the actor's queue
        self._events: list[ProviderEvent] = []
        # Invariant: set exactly while a drain is queued and has not started.
        self._queued = False

    def add(self, event: ProviderEvent) -> None:
        self._events.append(event)
        if not self._queued:
            self._queued = True
            self._post(self._drain)

    async def drain_now(self) -> None:
        """Handle what waits, inside the current job (a settings change: the provider's
        reports land before corral records its conclusion). A drain already queued finds
        nothing, or only what came after."""
        self._queued = False
        events, self._events = self._events, []
        await drain(self._handler, events)

    async def _drain(self) -> None:
        self._queued = False
        events, self._events = self._events, []
        await drain(self._handler, events)


async def drain(handler: InboxHandler, events: list[ProviderEvent]) -> None:
    """Handle `events` in order; rows that are ready together go in one batch."""
    ready: list[NewRow] = []
    replaying = False  # the previous event was history too: its rows batch with these
    for event in events:
        if isinstance(event, ProviderItem):
            if event.from_history:
                # The history gate, before any judging of turns.
                if not handler.takes_rows():
                    continue
                if not replaying:
                    # What arrived before goes first, the pending fragment included.
                    handler.writer.append_nowait(ready)
                    ready = []
                    await handler.writer.flush()
                    replaying = True
                ready.append(handler.history_row(event))
                continue
            replaying = False
            if type(event.item) is not UserMessage:
                ready.extend(handler.fragment_rows(event))
                continue
        replaying = False
        handler.writer.append_nowait(ready)
        ready = []
        await handler.handle(event)
    # Not awaited: the next rows are coalesced while these commit (published after their
    # commit, in order); a failed commit surfaces at the timeline writer's next step.
    handler.writer.append_nowait(ready)
