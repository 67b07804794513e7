"""What each provider event changes, for one agent's actor: the inbox's handler
(inbox.InboxHandler). A turn the provider starts by itself becomes an autonomous run; a
fragment is judged by the turn book, reconciled as an echo or coalesced into rows; a terminal
event ends the turn it belongs to (and only that one); permission requests and resolutions go
to the permission desk. On the actor's queue only.

Must not: end a turn itself (the actor's `finish` does) or take an event of another turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import assert_never

from corral_server.domain import events as ev
from corral_server.domain.agent import AgentError, Closed
from corral_server.manager import permissions, titles
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_history import HistoryKeeper
from corral_server.manager.actor_permissions import PermissionDesk
from corral_server.manager.actor_prompts import Prompts
from corral_server.manager.oversize import MAX_CODE_BYTES, bounded_text
from corral_server.manager.turns import ActiveTurn, AutonomousRun
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderSessionDied,
    ProviderSettings,
    ProviderTitle,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    ProviderTurnStarted,
)
from corral_server.timeline.store import NewRow

log = logging.getLogger(__name__)


class ProviderEvents:
    def __init__(
        self,
        core: ActorCore,
        *,
        prompts: Prompts,
        history: HistoryKeeper,
        permissions: PermissionDesk,
        finish: Callable[[ActiveTurn, ev.TurnTerminal], Awaitable[None]],
    ) -> None:
        self._core = core
        self._prompts = prompts
        self._history = history
        self._permissions = permissions
        self._finish = finish

    @property
    def writer(self) -> TimelineWriter:
        return self._core.writer

    def takes_rows(self) -> bool:
        return not self._core.jobs.stopped and not isinstance(
            self._core.state.snapshot.lifecycle, Closed
        )

    def history_row(self, event: ProviderItem) -> NewRow:
        return self._history.history_row(event)

    def fragment_rows(self, event: ProviderItem) -> tuple[NewRow, ...]:
        # The hot path (every streamed fragment): the checks inline, one writer lookup.
        core = self._core
        turns = core.turns
        if core.jobs.stopped or not turns.accepts(event.turn_id):
            return ()
        writer = core.writer
        active = turns.active
        return writer.offer(writer.admit(event, active.turn_id if active is not None else None))

    async def handle(self, event: ProviderEvent) -> None:
        if self._core.jobs.stopped or isinstance(self._core.state.snapshot.lifecycle, Closed):
            return
        agent_id = self._core.state.snapshot.id
        match event:
            case ProviderTurnStarted(turn_id=turn_id):
                if self._core.turns.active is None and not await self._core.turns.is_finished(
                    turn_id
                ):
                    # A turn the provider started by itself: an autonomous run.
                    settled = asyncio.get_running_loop().create_future()
                    autonomous = AutonomousRun(turn_id, settled)
                    self._core.writer.publish((self._prompts.begin(autonomous),))
                # else: a duplicate of the turn_started we already published
            case ProviderItem():
                if self._core.turns.accepts(event.turn_id) and not await self._history.reconciled(
                    event
                ):
                    await self._core.writer.append(self._offer(event))
            case ProviderTurnCompleted(turn_id=turn_id, usage=usage):
                await self._terminal(turn_id, ev.TurnCompleted(agent_id, turn_id, usage))
            case ProviderTurnFailed(turn_id=turn_id, error=error):
                error = AgentError(
                    bounded_text(error.message), bounded_text(error.code, MAX_CODE_BYTES)
                )
                await self._terminal(turn_id, ev.TurnFailed(agent_id, turn_id, error))
            case ProviderTurnCanceled(turn_id=turn_id, reason=reason):
                reason = bounded_text(reason)
                await self._terminal(turn_id, ev.TurnCanceled(agent_id, turn_id, reason))
            case ProviderPermissionRequested(turn_id=turn_id, permission=permission):
                active = self._core.turns.active
                if active is not None and self._core.turns.accepts(turn_id):
                    await self._permissions.request(
                        permissions.admitted(permission, active.turn_id)
                    )
            case ProviderPermissionResolved(request_id=request_id, behavior=behavior):
                # The provider settled it itself; an echo of corral's own answer finds nothing
                # pending and is dropped (the receipt comes first: docs/design.md#permissions).
                pending = self._core.state.snapshot.pending_permissions
                if any(p.id == request_id for p in pending):
                    self._permissions.resolve({request_id}, behavior)
            case ProviderSessionDied():
                pass  # each session's own sink posts its death (actor_session.py)
            case ProviderTitle(title=title):
                self._retitle(title)
            case ProviderSettings(model=model, mode=mode):
                self._settings(model, mode)
            case _:
                assert_never(event)

    def _settings(self, model: str | None, mode: str | None) -> None:
        """The model or mode the provider says the session runs with now."""
        state = self._core.state
        agent = state.snapshot
        model = agent.model if model is None else bounded_text(model, MAX_CODE_BYTES)
        mode = agent.mode if mode is None else bounded_text(mode, MAX_CODE_BYTES)
        if (model, mode) != (agent.model, agent.mode):
            state.set(replace(agent, model=model, mode=mode))

    def _retitle(self, title: str) -> None:
        """A provider's title, kept unless a person set one; a title is never worth failing
        anything for (docs/design.md#titles)."""
        state = self._core.state
        try:
            titled = titles.with_provider_title(state.snapshot, title)
        except Exception:
            log.warning("agent %s: a provider title was dropped", state.snapshot.id, exc_info=True)
            return
        if titled is not state.snapshot:
            state.set(titled)

    def _offer(self, event: ProviderItem) -> tuple[NewRow, ...]:
        """Admit a provider fragment (the provider boundary) and give it to the coalescer;
        returns the rows to append now."""
        active = self._core.turns.active
        turn_id = active.turn_id if active is not None else None
        writer = self._core.writer
        return writer.offer(writer.admit(event, turn_id))

    async def _terminal(self, turn_id: str, terminal: ev.TurnTerminal) -> None:
        active = await self._core.turns.ended_by(turn_id)
        if active is None:
            return
        # The terminal names the turn as its TurnStarted did (an id-less autonomous turn
        # keeps its empty id; a terminal without an id borrows the active one:
        # docs/design.md#turns).
        await self._finish(active, replace(terminal, turn_id=active.turn_id))
