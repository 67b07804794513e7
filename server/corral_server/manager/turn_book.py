"""The turn book of one agent's actor: which turn runs, whether a successor is being handed
the slot, the lifecycle the last turn ended in, and which turns have finished, with the
ownership checks every provider event passes.

Called only on the actor's queue. Must not change the agent's snapshot or write rows (the
actor does, with what the book answers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from corral_server.domain.agent import Idle, Lifecycle
from corral_server.manager.turns import ActiveTurn, owns
from corral_server.records.store import FinishedTurns

log = logging.getLogger(__name__)

# Finished turn ids a book keeps in memory (the durable set keeps them all): late events of a
# turn this old are very unlikely, and the durable set still stops a restart of one.
RECENT_FINISHED = 256


class TurnBook:
    def __init__(self, agent_id: str, finished: FinishedTurns | None) -> None:
        self._agent_id = agent_id
        # Invariant: set exactly while the lifecycle is Running, except during a handoff.
        self.active: ActiveTurn | None = None
        # A handoff: the running turn has ended (or is being canceled for a replacement) and
        # its successor is about to start; readers still see Running, REJECT prompts are
        # busy.
        self.handoff = False
        # The lifecycle the last turn ended in, shown if nothing follows it.
        self.ended: Lifecycle = Idle()
        # Turns that ended: their late events are dropped (dedupe by turn state, no window).
        # The most recent RECENT_FINISHED, in finish order; older ones are in `_finished`
        # (when durable), asked only where a turn would otherwise (re)start.
        self._recent: dict[str, None] = {}
        self._finished = finished

    @property
    def busy(self) -> bool:
        """A turn runs or a successor is on its way: a REJECT prompt is refused."""
        return self.active is not None or self.handoff

    @property
    def busy_turn_id(self) -> str:
        """The running turn's id for an AGENT_BUSY answer ("" during a bare handoff)."""
        return self.active.turn_id if self.active is not None else ""

    @property
    def recent_finished(self) -> Collection[str]:
        return self._recent.keys()

    def open_handoff(self) -> str | None:
        """Hold the slot for a successor; the running turn's id (None: nothing runs)."""
        if self.active is None:
            return None
        self.handoff = True
        return self.active.turn_id

    def finish(self, active: ActiveTurn) -> None:
        """`active` ended: the slot is free and its late events are dropped from now on."""
        self.active = None
        if active.turn_id:  # an id-less autonomous turn must not block the next one
            self._remember(active.turn_id)

    def _remember(self, turn_id: str) -> None:
        recent = self._recent
        recent[turn_id] = None
        if len(recent) > RECENT_FINISHED:
            del recent[next(iter(recent))]  # the oldest: the durable set still has it
        if self._finished is not None:
            self._finished.add(self._agent_id, turn_id).add_done_callback(self._stored)

    async def is_finished(self, turn_id: str) -> bool:
        if turn_id in self._recent:
            return True
        store = self._finished
        return store is not None and bool(turn_id) and await store.contains(self._agent_id, turn_id)

    def accepts(self, turn_id: str) -> bool:
        """Whether an event naming `turn_id` ("" = none) may change the agent now."""
        active = self.active
        if active is not None:
            return owns(active, turn_id)
        return turn_id not in self._recent

    async def ended_by(self, turn_id: str) -> ActiveTurn | None:
        """The running turn a terminal event naming `turn_id` ends (None: it ends none)."""
        active = self.active
        if active is None or turn_id in self._recent:
            return None  # a late or duplicate terminal event: that turn is already settled
        if not owns(active, turn_id):
            return None  # the end of another turn, never of this one
        if turn_id and turn_id != active.turn_id and await self.is_finished(turn_id):
            # An id-less autonomous run owns every id, but not the end of a turn that
            # finished before it (older than the recent ones: after a restart, say).
            return None
        return active

    def _stored(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error(
                "agent %s: its record was not stored", self._agent_id, exc_info=done.exception()
            )
