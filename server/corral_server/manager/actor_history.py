"""The part of an agent's actor for what came before: history replay, an import's history
(ImportAgent), echo reconciliation and Rewind (docs/design.md#echo-and-rewind), ReloadAgent, and
ending a turn a restart interrupted (docs/design.md#resume). On the queue only."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    AgentError,
    Errored,
    Idle,
    Initializing,
    Running,
)
from corral_server.domain.timeline import Cursor, Direction, TimelineRow, UserMessage
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.echo_book import EchoBook
from corral_server.manager.sanitize import sanitize_text
from corral_server.manager.turns import ActiveTurn, AutonomousRun
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import (
    ProviderItem,
)
from corral_server.timeline.store import NewRow

log = logging.getLogger(__name__)

# Rows copied per append when a rewind re-bases a timeline (and per batch of an import).
REWIND_BATCH = 1_000
# The error code of a turn a daemon restart cut short.
DAEMON_RESTARTED = "DAEMON_RESTARTED"


class HistoryKeeper:
    def __init__(
        self,
        core: ActorCore,
        *,
        new_writer: Callable[[str, int], TimelineWriter],
        sessions: SessionKeeper,
        echoes: EchoBook,
        register: Callable[[str, str], Awaitable[Agent]],
        finish: Callable[[ActiveTurn, ev.TurnTerminal], Awaitable[None]],
    ) -> None:
        self._core = core
        self._new_writer = new_writer  # installs a timeline writer for a re-based timeline
        self._sessions = sessions
        self._echoes = echoes
        self._register = register
        self._finish = finish

    @property
    def _agent_id(self) -> str:
        return self._core.state.snapshot.id

    def history_row(self, event: ProviderItem) -> NewRow:
        """The history gate (docs/design.md#resume): an item the provider replays from its history
        (`from_history`) becomes a row as it is, with no turn id, whatever turn runs or
        ended: it is not judged by the turn gates, not coalesced, never reconciled as an
        echo, and never starts or ends a turn. Nothing else changes: no lifecycle, no
        `updated_at`, no attention, no upsert. Subscribers see only its
        `timeline_row_appended` (a timeline's seqs reach every follower without gaps), and
        StreamTurn never carries it (it names no turn)."""
        admitted = self._core.writer.admit(event, None)  # the provider boundary: mended text
        now = self._core.deps.clock.now_ms()
        return NewRow(admitted.item, now, "", admitted.provider_message_id)

    async def prime(self, items: Sequence[ProviderItem], provider_session_id: str) -> Agent:
        """ImportAgent: a new agent's timeline primed with a provider session's conversation,
        each item through the history gate (`history_row`), in bounded batches; then the
        agent is idle with that provider session, which its first turn resumes (no session
        opens here: the SessionKeeper opens it lazily, resuming by id)."""
        rows = [self.history_row(item) for item in items]
        for start in range(0, len(rows), REWIND_BATCH):
            await self._core.writer.append(rows[start : start + REWIND_BATCH])
        info = self._core.deps.provider.info()
        self._core.state.set(
            replace(
                self._core.state.snapshot,
                lifecycle=Idle(),
                provider_session_id=provider_session_id,
                model=info.models[0].id if info.models else "",
                mode=info.modes[0].id if info.modes else "",
            )
        )
        return self._core.state.agent

    async def end_interrupted_turn(self) -> None:
        """A restored agent whose snapshot says Running: its turn died with the old daemon.
        It ends with a clear error row and turn_failed, and the agent is idle again, or runs
        its next queued prompt (no provider can resume a turn yet)."""
        lifecycle = self._core.state.snapshot.lifecycle
        if not isinstance(lifecycle, Running):
            return
        settled = asyncio.get_running_loop().create_future()
        active = AutonomousRun(lifecycle.active_turn_id, settled)
        self._core.turns.active = active
        error = AgentError("interrupted by a daemon restart", DAEMON_RESTARTED)
        await self._finish(active, ev.TurnFailed(self._agent_id, active.turn_id, error))
        if (
            not self._core.turns.handoff
        ):  # else the next queued prompt is on its way: Running goes on
            self._core.state.set(replace(self._core.state.snapshot, lifecycle=Idle()))

    async def reload(self, rehydrate: bool) -> Agent:
        """Restart the provider session under the same agent id. The caller settled the
        running turn first (a turn started since makes this AGENT_BUSY). The timeline and its
        epoch stay, unless `rehydrate`: then the timeline is re-based under a new epoch,
        announced by TimelineReset (clients holding old cursors get stale_cursor), to be
        primed again from the provider's history (the scripted provider keeps none)."""
        self._core.state.ensure_open()
        if self._core.deps.is_shutting_down():
            raise errors.ShuttingDown()
        if self._core.turns.active is not None:
            raise errors.AgentBusy(self._agent_id, self._core.turns.active.turn_id)
        await self._core.writer.flush()
        old, self._sessions.current = self._sessions.current, None
        if old is not None:
            try:
                await self._sessions.close(old)
            except Exception:
                log.warning("agent %s: old session close failed", self._agent_id, exc_info=True)
        agent = self._core.state.snapshot
        if rehydrate:
            head = await self._core.deps.timeline.rebase(agent.id)
            self._new_writer(head.epoch, head.next_seq)
            reset = ev.TimelineReset(agent.id, head.epoch, "reloaded from the provider's history")
            self._core.writer.publish((self._core.deps.publisher.prepare(reset),))
            agent = replace(agent, epoch=head.epoch)
        self._core.state.set(replace(agent, lifecycle=Initializing()))
        try:
            return await self._register(agent.model, agent.mode)
        except errors.CorralError as exc:
            error = AgentError(f"reload failed: {exc.message}", exc.reason)
            self._core.state.set(
                replace(self._core.state.snapshot, lifecycle=Errored(error), last_error=error)
            )
            raise

    async def rewind(self, message_id: str) -> Agent:
        """Back to before the user message the provider confirmed as `message_id`: the
        timeline is re-based under a new epoch holding the rows before it (renumbered from
        1), announced by TimelineReset; clients holding old cursors get stale_cursor. A
        message the provider never confirmed is FAILED_PRECONDITION."""
        self._core.state.ensure_open()
        if self._core.turns.busy:
            raise errors.AgentBusy(self._agent_id, self._core.turns.busy_turn_id)
        await self._core.writer.flush()
        await self._core.writer.barrier()
        agent_id = self._agent_id
        kept = await self._rows_before(message_id)
        head = await self._core.deps.timeline.rebase(agent_id)
        self._new_writer(head.epoch, head.next_seq)
        reset = ev.TimelineReset(agent_id, head.epoch, f"rewound to before message {message_id}")
        self._core.writer.publish((self._core.deps.publisher.prepare(reset),))
        self._core.state.set(replace(self._core.state.snapshot, epoch=head.epoch))
        rows = [NewRow(r.item, r.timestamp_ms, r.turn_id, r.provider_message_id) for r in kept]
        for start in range(0, len(rows), REWIND_BATCH):
            await self._core.writer.append(rows[start : start + REWIND_BATCH])
        self._echoes.clear()
        return self._core.state.agent

    async def _rows_before(self, message_id: str) -> list[TimelineRow]:
        """The retained rows before the row the provider confirmed as `message_id`."""
        timeline, agent_id = self._core.deps.timeline, self._agent_id
        epoch = self._core.state.snapshot.epoch
        seen: list[TimelineRow] = []
        cursor = Cursor(epoch, 0)
        while True:
            page = await timeline.fetch(agent_id, Direction.AFTER, cursor, 0)
            for row in page.rows:
                if row.provider_message_id == message_id and type(row.item) is UserMessage:
                    return seen
                seen.append(row)
            if not page.has_newer or not page.rows:
                break
            cursor = Cursor(epoch, page.rows[-1].seq)
        raise errors.MessageNotConfirmed(self._agent_id, message_id)

    async def reconciled(self, event: ProviderItem) -> bool:
        """Echo reconciliation (docs/design.md#echo-and-rewind): a user message the provider reports
        that is the echo of a prompt corral stored (same client_message_id, or the same text in the
        running turn) is not stored twice; the provider's message id is written into the
        stored row (its only in-place change) and subscribers learn it by RowUpdated."""
        item = event.item
        if type(item) is not UserMessage or self._core.turns.active is None:
            return False
        seq = self._echoes.find(item)
        if seq is None:
            return False
        provider_id = sanitize_text(event.provider_message_id or item.message_id)
        if provider_id:
            agent_id = self._agent_id
            await self._core.writer.barrier()  # the prompt's row is committed before it changes
            await self._core.deps.timeline.set_provider_message_id(agent_id, seq, provider_id)
            updated = ev.RowUpdated(agent_id, self._core.state.snapshot.epoch, seq, provider_id)
            self._core.writer.publish((self._core.deps.publisher.prepare(updated),))
        return True
