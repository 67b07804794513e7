"""The part of an agent's actor that stops things: interrupts (off the queue, fenced by turn
id), close, archive, daemon shutdown (through the queue), kill; and what a job that fails
unexpectedly means (the running turn ends failed, the agent errored). See actor.py for the
rules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import Agent, AgentError, Closed
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_permissions import PermissionDesk
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.deadlines import deadline, within
from corral_server.manager.sanitize import sanitize_text
from corral_server.manager.turns import ActiveTurn, CancelOutcome
from corral_server.providers.base import InterruptResult

log = logging.getLogger(__name__)

# The error code of a turn that corral itself could not record (a failed writer step).
WRITER_FAILED = "WRITER_FAILED"


class Ending:
    def __init__(
        self,
        core: ActorCore,
        *,
        sessions: SessionKeeper,
        permissions: PermissionDesk,
        finish: Callable[[ActiveTurn, ev.TurnTerminal], Awaitable[None]],
    ) -> None:
        self._core = core
        self._sessions = sessions
        self._permissions = permissions  # its follow-ups stop with the actor
        self._finish = finish

    @property
    def agent(self) -> Agent:
        return self._core.state.agent

    async def interrupt(self, turn_id: str) -> InterruptResult:
        """Ask the provider to stop turn `turn_id`. Off the queue on purpose (a provider slow
        to answer must not stall the single writer), under the interrupt deadline, and fenced twice:
        here, and by the provider, which ignores an interrupt for a turn it is not running.
        A deadline or an error counts as "not confirmed" (REFUSED)."""
        active, session = self._core.turns.active, self._sessions.current
        if active is None or active.turn_id != turn_id or session is None:
            return InterruptResult.NOT_RUNNING
        try:
            return await deadline(
                self._core.deps.clock,
                self._core.deps.timeouts.interrupt_s,
                session.interrupt(turn_id),
                "interrupt",
                self._core.deps.call_times,
            )
        except Exception:
            log.warning("agent %s: interrupt of %s failed", self.agent.id, turn_id, exc_info=True)
            return InterruptResult.REFUSED

    async def stop_turn(self, active: ActiveTurn) -> CancelOutcome:
        """Stop `active` the way CancelTurn does (docs/design.md#cancel), off the queue: the
        interrupt for its id; then up to `settle_s` for it to end. It ended -> SETTLED; it
        did not and the provider had confirmed -> ended here with TurnCanceled, SETTLED; it
        did not and the provider had not -> REFUSED (the turn goes on). NOT_RUNNING: it had
        ended by itself (its end is queued before anything the caller queues next)."""
        deps = self._core.deps
        result = await self.interrupt(active.turn_id)
        if result is InterruptResult.NOT_RUNNING:
            return CancelOutcome.NOT_RUNNING
        settled = await within(deps.clock, deps.timeouts.settle_s, asyncio.shield(active.settled))
        if settled is not None:
            return CancelOutcome.SETTLED
        if result is not InterruptResult.CONFIRMED:
            return CancelOutcome.REFUSED
        reason = "interrupt confirmed, turn did not end"
        await self._core.jobs.call(lambda: self.force_cancel(active.turn_id, reason))
        return CancelOutcome.SETTLED

    async def force_cancel(self, turn_id: str, reason: str) -> None:
        """The provider confirmed the interrupt but never ended the turn: end it ourselves
        (only after a confirmed interrupt: docs/design.md#cancel)."""
        active = self._core.turns.active
        if active is not None and active.turn_id == turn_id:
            await self._finish(active, ev.TurnCanceled(self.agent.id, turn_id, reason))

    async def close(self) -> Agent:
        """Close the runtime and keep the record. A session close that fails or misses its
        deadline still broadcasts the closed snapshot, then raises (docs/design.md#lifecycle)."""
        if isinstance(self.agent.lifecycle, Closed):
            return self.agent
        failure: Exception | None = None
        if self._core.turns.active is not None:
            active = self._core.turns.active
            await self._finish(
                active, ev.TurnCanceled(self.agent.id, active.turn_id, "agent closed")
            )
        await self._core.writer.flush()
        if self._sessions.current is not None:
            try:
                await self._sessions.close(self._sessions.current)
            except Exception as exc:
                failure = exc
        closed = Closed(self._core.deps.clock.now_ms())
        self._core.state.set(
            replace(self._core.state.snapshot, lifecycle=closed, queued_prompts=())
        )
        self._stop()
        if isinstance(failure, errors.CorralError):
            raise failure
        if failure is not None:
            raise errors.CorralError(
                f"the provider session failed to close: {failure}"
            ) from failure
        return self.agent

    def _stop(self) -> None:
        self._core.jobs.stop()
        self._core.writer.cancel_timer()
        self._permissions.follow_ups.cancel()

    async def shutdown(self) -> None:
        """Daemon shutdown, through the queue like every other change: what was queued
        before runs first (a queued prompt is refused: the manager refuses new work before
        it shuts actors down), then the session closes under its deadline and the actor
        stops. The state stays as it is."""
        if not self._core.jobs.running and self._sessions.current is None:
            self._stop()  # never ran a job: no session to close, no task to stop
        else:
            self._core.jobs.post(self._shutdown_step)
        await self.stopped()

    async def _shutdown_step(self) -> None:
        if self._core.jobs.stopped:
            return
        try:
            if self._sessions.current is not None:
                await self._sessions.close(self._sessions.current)
        except Exception:
            log.warning(
                "agent %s: session close failed during shutdown", self.agent.id, exc_info=True
            )
        finally:
            self._stop()

    async def archive(self) -> Agent:
        """ArchiveAgent, on the queue: marked archived (the mark kept by every later write), then
        closed like CloseAgent (a running turn canceled, the session closed)."""
        if self._core.state.snapshot.archived_at_ms is None:
            now = self._core.deps.clock.now_ms()
            self._core.state.set(replace(self._core.state.snapshot, archived_at_ms=now))
        return await self.close()

    def archive_closed(self) -> Agent:
        """ArchiveAgent of an agent closed before: its queue has stopped, so nothing else can
        write it; the mark is set here, on the loop, at once."""
        assert self._core.jobs.stopped, "an open agent is archived through its queue"
        if self._core.state.snapshot.archived_at_ms is None:
            now = self._core.deps.clock.now_ms()
            self._core.state.set(replace(self._core.state.snapshot, archived_at_ms=now))
        return self.agent

    def retire(self) -> None:
        """A closed agent restored after a restart: its record stays, its queue takes nothing."""
        self._stop()

    def kill(self) -> None:
        """Stop at once, whatever is running (shutdown's deadline passed)."""
        self._core.jobs.kill()
        self._permissions.follow_ups.cancel()

    async def stopped(self) -> None:
        """Until the actor's task has ended (at once when it never started)."""
        await self._core.jobs.stopped_running()

    async def job_failed(self, exc: Exception, awaited: bool) -> None:
        """What a job's exception means (the queue's `on_error`)."""
        if isinstance(exc, errors.CorralError):
            # A refusal (busy, closed, shutting down, a provider deadline): the step decided
            # it before changing anything, or recorded the failure itself.
            if not awaited:
                log.warning("agent %s: %s", self._core.state.snapshot.id, exc.message)
        else:
            await self._writer_failed(exc)

    async def _writer_failed(self, exc: Exception) -> None:
        """A timeline writer step failed unexpectedly: end the running turn as failed (with an error
        row, when one can be stored) and leave the agent errored, never stuck in running."""
        agent_id = self._core.state.snapshot.id
        log.error("agent %s: a writer step failed", agent_id, exc_info=exc)
        error = AgentError(
            sanitize_text(
                f"corral could not record the agent's output: {type(exc).__name__}: {exc}"
            )[:500],
            WRITER_FAILED,
        )
        try:
            active = self._core.turns.active
            if active is not None:
                await self._finish(active, ev.TurnFailed(agent_id, active.turn_id, error))
            elif not isinstance(self._core.state.snapshot.lifecycle, Closed):
                self._core.state.errored(error)
        except Exception:
            log.exception("agent %s: could not record a writer failure", agent_id)
