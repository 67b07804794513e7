"""The part of an agent's actor that owns its provider session: opening one (new, or
resuming the stored provider session after a daemon restart or a death), hearing that it
died, and keeping `Agent.provider_session_id` equal to what the provider reports. On the
queue only.

Resume (docs/design.md#resume). A restored agent keeps its record's provider_session_id; its first
turn opens a session with `resume_session_id` set to it, so the provider continues the same
conversation. Adapters never replay history to the sink (ACP's session/load replay is
dropped by the adapter): corral's timeline already holds those rows. A resume the provider
refuses (it no longer knows the session) is not fatal: the agent gets an error row and
`last_error` (code RESUME_FAILED) saying so, and a new session starts in its place, so the
turn runs, without the earlier conversation. A resume that misses its deadline is not retried
fresh (a second deadline would hold the queue twice as long): the turn fails to start with
PROVIDER_TIMEOUT and the next one tries the resume again.

Death. Each session reports through a sink of its own, so a death reported
by a session corral has already replaced (a reload) or closed can never mark its successor
dead. The death is handled on the queue after everything the session reported before it:
a turn the provider did not end ends failed (AGENT_EXITED); the dead session is closed (its
leftovers reaped) and dropped, and the next turn opens a new one, resuming by id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import Agent, AgentError, Errored, Idle, Initializing
from corral_server.domain.timeline import ErrorItem
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.deadlines import deadline
from corral_server.manager.oversize import MAX_ERROR_BYTES, cut_text
from corral_server.manager.sanitize import sanitize_text
from corral_server.manager.turns import ActiveTurn
from corral_server.providers.base import (
    EventSink,
    ProviderEvent,
    ProviderSession,
    ProviderSessionDied,
    SessionConfig,
)
from corral_server.timeline.store import NewRow

log = logging.getLogger(__name__)

# The code of the row (and last_error) of a stored provider session that could not be resumed.
RESUME_FAILED = "RESUME_FAILED"
# The code of a turn (or an idle agent's row) whose agent process ended unexpectedly.
AGENT_EXITED = "AGENT_EXITED"


@dataclass(slots=True)
class _Opened:
    """One session the actor asked for: set once the provider returned it."""

    session: ProviderSession | None = None


class SessionKeeper:
    def __init__(
        self,
        core: ActorCore,
        *,
        on_event: Callable[[ProviderEvent], None],
        finish: Callable[[ActiveTurn, ev.TurnTerminal], Awaitable[None]],
    ) -> None:
        self._core = core
        self._on_event = on_event  # the actor's inbox, for every event but a death
        self._finish = finish  # ends a turn the provider did not end
        # The open session (None: none yet, closed, dead, or being replaced by a reload).
        self.current: ProviderSession | None = None

    async def register(self, model: str, mode: str) -> Agent:
        """Registration: ask the provider for a session, then go idle. Events the session
        reports queue behind this step, so none reaches a half-built agent."""
        deps = self._core.deps
        session = await self.create(model, mode, "")
        if deps.is_shutting_down():
            await self.close(session)  # leave no orphan session behind
            raise errors.ShuttingDown()
        self.current = session
        info = deps.provider.info()
        self._core.state.set(
            replace(
                self._core.state.snapshot,
                lifecycle=Idle(),
                provider_session_id=session.session_id,
                model=model or (info.models[0].id if info.models else ""),
                mode=mode or (info.modes[0].id if info.modes else ""),
            )
        )
        return self._core.state.agent

    async def ensure(self) -> None:
        """A turn needs a session: an agent restored after a restart, whose session died, or
        whose reload failed opens one now, lazily (start-up reads headers only:
        docs/design.md#resume), resuming the stored provider session when there is one to resume."""
        agent = self._core.state.snapshot
        if isinstance(agent.lifecycle, Initializing):
            raise errors.FailedPrecondition(f"agent {agent.id!r} is still initializing")
        if self.current is not None:
            return
        # A timeline without rows has no conversation to continue (and a provider may not
        # have kept a session that never ran a turn).
        resume_id = agent.provider_session_id if self._core.writer.next_seq > 1 else ""
        try:
            session = await self.create(agent.model, agent.mode, resume_id)
        except (errors.ProviderTimeout, errors.ShuttingDown):
            raise
        except Exception as exc:
            if not resume_id:
                raise
            await self._resume_failed(resume_id, exc)
            session = await self.create(agent.model, agent.mode, "")
        self.current = session
        self._core.state.set(
            replace(self._core.state.snapshot, provider_session_id=session.session_id)
        )

    async def create(self, model: str, mode: str, resume_id: str) -> ProviderSession:
        """Ask the provider for a session (under the create deadline), reporting through a
        sink of its own."""
        deps, agent = self._core.deps, self._core.state.snapshot
        config = SessionConfig(
            agent.id,
            agent.cwd,
            model,
            mode,
            resume_session_id=resume_id,
            daemon_tag=deps.daemon_tag,
        )
        opened = _Opened()
        create = deps.provider.create_session(config, self._sink(opened))
        session = await deadline(
            deps.clock, deps.timeouts.create_session_s, create, "create_session", deps.call_times
        )
        opened.session = session
        return session

    async def close(self, session: ProviderSession) -> None:
        deps = self._core.deps
        await deadline(deps.clock, deps.timeouts.close_s, session.close(), "close", deps.call_times)

    def with_session_id(self, agent: Agent) -> Agent:
        """`agent` with the provider session id the session reports now (Claude Code may
        name another one after a turn), so a later resume uses the right one."""
        session = self.current
        if session is None:
            return agent
        session_id = session.session_id
        if session_id and session_id != agent.provider_session_id:
            return replace(agent, provider_session_id=session_id)
        return agent

    def _sink(self, opened: _Opened) -> EventSink:
        def sink(event: ProviderEvent) -> None:
            if isinstance(event, ProviderSessionDied):
                # After the events the session reported before it (already in the inbox,
                # whose drain is queued ahead of this), and only for this session.
                self._core.jobs.post(lambda: self._died(opened, event.reason))
            else:
                self._on_event(event)

        return sink

    async def _resume_failed(self, resume_id: str, exc: Exception) -> None:
        agent_id = self._core.state.snapshot.id
        why = exc.message if isinstance(exc, errors.CorralError) else f"{type(exc).__name__}: {exc}"
        log.warning("agent %s: resuming session %s failed: %s", agent_id, resume_id, why)
        text = (
            f"could not resume the provider session {resume_id}: {why}; a new session starts"
            " without the earlier conversation"
        )
        error = AgentError(cut_text(sanitize_text(text), MAX_ERROR_BYTES), RESUME_FAILED)
        await self._error_row(error)

    async def _error_row(self, error: AgentError) -> None:
        """An error row outside any turn, and `last_error` saying the same."""
        writer = self._core.writer
        await writer.flush()
        now = self._core.deps.clock.now_ms()
        await writer.append([NewRow(ErrorItem(error.message, error.code), now, "")])
        self._core.state.set(replace(self._core.state.snapshot, last_error=error))

    async def _died(self, opened: _Opened, reason: str) -> None:
        session = opened.session
        if session is None or session is not self.current or self._core.jobs.stopped:
            return  # replaced (a reload) or closed since: not this agent's session any more
        self.current = None
        agent_id = self._core.state.snapshot.id
        log.warning("agent %s: its agent process ended: %s", agent_id, reason)
        text = cut_text(sanitize_text(f"the agent process ended: {reason}"), MAX_ERROR_BYTES)
        error = AgentError(text, AGENT_EXITED)
        active = self._core.turns.active
        if active is not None:  # the provider did not end its turn: it ends here
            await self._finish(active, ev.TurnFailed(agent_id, active.turn_id, error))
        elif not isinstance(self._core.state.snapshot.lifecycle, Errored):  # else a turn's row says
            await self._error_row(error)
        try:
            await self.close(session)  # its readers, and whatever it left behind
        except Exception:
            log.warning("agent %s: closing a dead session failed", agent_id, exc_info=True)
