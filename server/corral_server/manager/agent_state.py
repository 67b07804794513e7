"""One agent's snapshot and the one way it changes (`set`): replaced whole, stamped with a
strictly later `updated_at`, stored (durable stores, last write wins) and published as
`AgentUpserted`, then everyone waiting for a change is woken.

Called only on the actor's queue (readers only read `agent`). Must not decide anything about
the agent: the actor's parts decide, this records and announces.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    PARENT_AGENT_ID_LABEL,
    Agent,
    AgentError,
    Attention,
    AttentionReason,
    Closed,
    Errored,
)
from corral_server.manager.actor_deps import ActorDeps
from corral_server.manager.specs import AgentUpdate
from corral_server.manager.writer import TimelineWriter

log = logging.getLogger(__name__)


class AgentState:
    def __init__(self, agent: Agent, deps: ActorDeps, writer: Callable[[], TimelineWriter]) -> None:
        self.snapshot = agent  # replaced whole, only by the actor's task
        self._deps = deps
        # The timeline writer (replaced by a rewind or a rehydrating reload). Its next_seq
        # moves with every append; folding it into the snapshot on every row would cost more
        # than the row, so readers get it folded in on read (`agent`).
        self._writer = writer
        self._changed = asyncio.Event()
        # The latest snapshot's record write (durable stores): a prompt's ack waits for it.
        self._record_put: asyncio.Future[None] | None = None

    @property
    def agent(self) -> Agent:
        """The current snapshot, for readers."""
        next_seq = self._writer().next_seq
        if self.snapshot.next_seq != next_seq:
            self.snapshot = replace(self.snapshot, next_seq=next_seq)
        return self.snapshot

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change of the snapshot (a fresh event per change)."""
        return self._changed

    def set(self, changed: Agent) -> None:
        """Make `changed` (a `replace` of the snapshot: its fields are type-checked) the
        snapshot, with `updated_at` bumped strictly, and publish the upsert."""
        writer = self._writer()
        now = self._deps.clock.now_ms()
        updated = max(now, self.snapshot.updated_at_ms + 1)
        snapshot = replace(changed, updated_at_ms=updated, next_seq=writer.next_seq)
        prepared = self._deps.publisher.prepare(ev.AgentUpserted(snapshot))
        self.snapshot = snapshot
        records = self._deps.records
        if records is not None:
            # The whole snapshot, last write wins (nothing it lacks is erased); puts of one
            # agent between commits coalesce into one row write.
            put = records.put(snapshot)
            put.add_done_callback(self._record_written)
            self._record_put = put
        writer.publish((prepared,))
        # Wake everyone waiting for a change (WaitForIdle), then start a new generation.
        self._changed.set()
        self._changed = asyncio.Event()

    def update(self, change: AgentUpdate) -> Agent:
        """UpdateAgent: the fields it names, the others kept."""
        self.ensure_open()
        agent = self.snapshot
        self.set(
            replace(
                agent,
                title=agent.title if change.title is None else change.title,
                labels=agent.labels if change.labels is None else dict(change.labels),
                mode=agent.mode if change.mode is None else change.mode,
                model=agent.model if change.model is None else change.model,
            )
        )
        return self.agent

    def clear_attention(self) -> Agent:
        if self.snapshot.attention.required:
            self.set(replace(self.snapshot, attention=Attention()))
        return self.agent

    def detach(self) -> Agent:
        """No longer a child: the parent label goes."""
        labels = self.snapshot.labels
        if PARENT_AGENT_ID_LABEL in labels:
            kept = {k: v for k, v in labels.items() if k != PARENT_AGENT_ID_LABEL}
            self.set(replace(self.snapshot, labels=kept))
        return self.agent

    def ensure_open(self) -> None:
        """A command on a closed agent is AGENT_CLOSED, and changes nothing."""
        if isinstance(self.snapshot.lifecycle, Closed):
            raise errors.AgentClosed(self.snapshot.id)

    def errored(self, error: AgentError) -> None:
        """The agent says what went wrong instead of looking busy (or idle) for ever."""
        self.set(replace(self.snapshot, lifecycle=Errored(error), last_error=error))

    async def durable(self) -> None:
        """Until the latest snapshot is stored: an acknowledged prompt's row is committed
        (its append awaited that), and so is the snapshot that says its turn runs."""
        put = self._record_put
        if put is not None and not put.done():
            await asyncio.shield(put)

    def attention(self, reason: AttentionReason) -> ev.AttentionRequired:
        """The event, with whom to notify by the clients' presence."""
        snapshot, presence = self.snapshot, self._deps.presence
        if presence is None:
            return ev.AttentionRequired(snapshot.id, reason)
        plan = presence.plan(snapshot, reason, self._deps.clock.now_ms())
        return ev.AttentionRequired(snapshot.id, reason, plan)

    def _record_written(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error(
                "agent %s: its record was not stored", self.snapshot.id, exc_info=done.exception()
            )
