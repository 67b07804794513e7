"""The part of an agent's actor that changes its running configuration
(docs/design.md#live-config): a model or mode change applied through the provider session,
and a restart of the agent's process with a changed provider entry, at its next idle moment.
On the queue only.

A settings change goes to the open session (`providers/live.py`); a provider that cannot make
it answers FAILED_PRECONDITION with its reason and nothing changes. What the provider reports
meanwhile (`ProviderSettings`, rows) is drained from the inbox before the snapshot records the
change, so no report of the provider's lands after corral's conclusion. An agent with no open
session records the change, and its next session starts with it.

A restart never interrupts a turn: asked while the agent is busy, it waits until a turn ends
with no successor. It closes the session and opens one with the new provider, resuming the
same provider session (docs/design.md#resume). Asked twice for the same provider it restarts
once: the request is judged on the queue against the provider the agent already has or
waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from corral_server.domain.agent import Agent
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.deadlines import deadline
from corral_server.manager.specs import AgentUpdate
from corral_server.providers.base import Provider
from corral_server.providers.live import SettingsChange, SettingsRefused, live_settings_of

log = logging.getLogger(__name__)


class LiveDesk:
    def __init__(
        self,
        core: ActorCore,
        *,
        sessions: SessionKeeper,
        drain: Callable[[], Awaitable[None]],
    ) -> None:
        self._core = core
        self._sessions = sessions
        self._drain = drain  # handles the provider events waiting in the inbox, now
        # The provider the agent restarts with at its next idle moment (None: none waits).
        self.pending: Provider | None = None

    async def update(self, change: AgentUpdate) -> Agent:
        """UpdateAgent: a model or mode that differs goes to the open session first."""
        state = self._core.state
        state.ensure_open()
        agent = state.snapshot
        live = SettingsChange(
            model=change.model if change.model not in (None, agent.model) else None,
            mode=change.mode if change.mode not in (None, agent.mode) else None,
        )
        session = self._sessions.current
        if live and session is not None:
            changer = live_settings_of(session)
            if changer is None:
                raise SettingsRefused(
                    f"provider {agent.provider!r} cannot change the {live.describe()} of a "
                    "running session",
                    metadata={"agent_id": agent.id, "provider": agent.provider},
                )
            deps = self._core.deps
            # A request the provider answers at once, like naming a turn: the same deadline.
            call = changer.change_settings(live)
            timeout = deps.timeouts.start_turn_s
            await deadline(deps.clock, timeout, call, "change_settings", deps.call_times)
            await self._drain()
        return state.update(change)

    async def restart_with(self, provider: Provider) -> bool:
        """Restart the agent's process with `provider`: now when idle, else once it is.
        False when the agent already has it or waits for it (or is closed)."""
        if provider is self._core.deps.provider or provider is self.pending:
            return False
        if self._core.state.snapshot.is_closed:
            return False
        self.pending = provider
        if self._core.turns.busy:
            log.info("agent %s: restarts its provider process once idle", self._agent_id)
        else:
            await self.restart_if_idle()
        return True

    def settled(self) -> None:
        """A turn ended with no successor: a restart that waited runs next on the queue."""
        if self.pending is not None:
            self._core.jobs.post(self.restart_if_idle)

    async def restart_if_idle(self) -> None:
        core = self._core
        provider = self.pending
        if provider is None or core.turns.busy or core.state.snapshot.is_closed:
            return
        self.pending = None
        core.deps = replace(core.deps, provider=provider)
        old, self._sessions.current = self._sessions.current, None
        if old is None:
            return  # no process to restart: the next session opens with the new provider
        try:
            await self._sessions.close(old)
        except Exception:
            log.warning("agent %s: closing its old session failed", self._agent_id, exc_info=True)
        if core.deps.counts is not None:
            core.deps.counts.restarts += 1
        try:
            await self._sessions.ensure()  # resumes the provider session it had
        except Exception as exc:
            # The next turn tries again (and says why, if it fails too).
            log.warning("agent %s: its restarted session did not open: %s", self._agent_id, exc)
            return
        log.info(
            "agent %s: restarted its provider process (provider entry changed)", self._agent_id
        )

    @property
    def _agent_id(self) -> str:
        return self._core.state.snapshot.id
