"""The part of an agent's actor for pending permissions (docs/design.md#permissions): requests,
answers, and the follow-up prompt a provider may ask for with an answer. On the queue, except the
follow-up's replace, which waits for a cancel (off the queue, like SendPrompt's REPLACE), and
the interrupt of a turn failed for asking too much (off the queue, like every interrupt).

Must not raise out of a request: it is handled in the middle of a batch of provider events,
and the rest of the batch must still be handled."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    AgentError,
    Attention,
    AttentionReason,
    PendingPermission,
    PermissionBehavior,
    PermissionResponse,
    QueuedBy,
)
from corral_server.domain.content import Prompt
from corral_server.manager import permissions
from corral_server.manager.actor_core import ActorCore
from corral_server.manager.actor_session import SessionKeeper
from corral_server.manager.background import Background
from corral_server.manager.deadlines import deadline
from corral_server.manager.turns import ActiveTurn, CancelOutcome, IfRunning, StartedTurn
from corral_server.providers.base import InterruptResult, ProviderSession

log = logging.getLogger(__name__)

FOLLOW_UP = QueuedBy.FOLLOW_UP


class TurnControl(Protocol):
    """What a follow-up asks of the actor: the steps SendPrompt's REPLACE takes."""

    async def stop_turn(self, active: ActiveTurn) -> CancelOutcome: ...

    async def close_handoff(self) -> None: ...

    async def start_turn(
        self, prompt: Prompt, client_message_id: str, if_running: IfRunning, queued_by: QueuedBy
    ) -> StartedTurn: ...


class PermissionDesk:
    def __init__(
        self,
        core: ActorCore,
        *,
        sessions: SessionKeeper,
        control: TurnControl,
        finish: Callable[[ActiveTurn, ev.TurnTerminal], Awaitable[None]],
    ) -> None:
        self._core = core
        self._sessions = sessions
        self._control = control
        self._finish = finish
        # Follow-ups and interrupts on their way, off the queue: canceled at the actor's stop.
        self.follow_ups = Background()

    @property
    def _agent_id(self) -> str:
        return self._core.state.snapshot.id

    async def request(self, permission: PendingPermission) -> None:
        """A provider's request: pending, published, attention raised for the first one."""
        try:
            agent = permissions.with_request(self._core.state.snapshot, permission)
        except errors.ResourceExhausted as exc:
            await self._fail_for_requests(exc.message)
            return
        if agent is None:
            return  # a repeated request for a pending id
        event = ev.PermissionRequested(agent.id, permission.turn_id, permission)
        publisher = self._core.deps.publisher
        requested = publisher.prepare(event)
        # Attention is edge-triggered: none pending -> one, and only if not already set.
        first = not self._core.state.snapshot.pending_permissions and not agent.attention.required
        if first:
            now = self._core.deps.clock.now_ms()
            agent = replace(agent, attention=Attention(True, AttentionReason.PERMISSION, now))
        self._core.state.set(agent)
        self._core.writer.publish((requested,))
        if first:
            attention = self._core.state.attention(AttentionReason.PERMISSION)
            self._core.writer.publish((publisher.prepare(attention),))

    async def _fail_for_requests(self, message: str) -> None:
        """More requests pending than MAX_PENDING_PERMISSIONS: a provider bug. The asking
        turn fails (its pending requests end with it, canceled) and the provider is asked to
        stop it, so the session takes the next prompt; events of the turn that follow are
        dropped as late ones, the rest of the batch is handled as usual."""
        active = self._core.turns.active
        if active is None:
            return
        log.warning("agent %s: turn %s failed: %s", self._agent_id, active.turn_id, message)
        error = AgentError(message, permissions.TOO_MANY_PERMISSIONS)
        await self._finish(active, ev.TurnFailed(self._agent_id, active.turn_id, error))
        session = self._sessions.current
        if session is not None:
            self.follow_ups.spawn(  # canceled if the actor stops first
                self._stop_failed_turn(session, active.turn_id),
                f"stop-failed-turn:{self._agent_id}",
            )

    async def _stop_failed_turn(self, session: ProviderSession, turn_id: str) -> None:
        deps = self._core.deps
        try:
            interrupt = session.interrupt(turn_id)
            result = await deadline(
                deps.clock, deps.timeouts.interrupt_s, interrupt, "interrupt", deps.call_times
            )
        except Exception:
            log.warning("agent %s: interrupt of failed turn %s failed", self._agent_id, turn_id)
            return
        if result is InterruptResult.REFUSED:
            log.warning(
                "agent %s: the provider goes on with failed turn %s",
                self._agent_id,
                turn_id,
            )

    def resolve(self, request_ids: set[str], behavior: PermissionBehavior | None) -> None:
        """Take requests out of the pending list and say how each ended."""
        ended = [p for p in self._core.state.snapshot.pending_permissions if p.id in request_ids]
        if not ended:
            return
        publisher = self._core.deps.publisher
        resolved = [
            publisher.prepare(ev.PermissionResolved(self._agent_id, p.turn_id, p.id, behavior))
            for p in ended
        ]
        self._core.state.set(permissions.without(self._core.state.snapshot, request_ids))
        self._core.writer.publish(resolved)

    async def respond(self, request_id: str, response: PermissionResponse) -> Agent:
        """RespondToPermission: the answer goes to the provider (under a deadline), then the
        request leaves the pending list and PermissionResolved is published. A resolution the
        provider reports meanwhile queues behind this step, so no client sees it before the
        RPC's own receipt."""
        self._core.state.ensure_open()
        permission = permissions.find(self._core.state.snapshot, request_id)
        permissions.check_answer(permission, response)
        session, deps = self._sessions.current, self._core.deps
        if session is None:
            raise errors.FailedPrecondition(f"agent {self._agent_id!r} has no provider session")
        answer = session.respond_permission(permission.turn_id, request_id, response)
        follow_up = await deadline(
            deps.clock, deps.timeouts.interrupt_s, answer, "respond_permission", deps.call_times
        )
        self.resolve({request_id}, response.behavior)
        if follow_up is not None:
            self._follow_up(follow_up)
        return self._core.state.agent

    def _follow_up(self, prompt: Prompt) -> None:
        """The provider answered with a follow-up prompt (docs/design.md#permissions): it starts
        as a turn replacing the running one, as SendPrompt with REPLACE does. The handoff
        opens here, before the RPC's receipt (the agent keeps reporting Running, with no
        idle moment); the cancel and the start follow off the queue."""
        active = self._core.turns.active
        if active is not None:
            self._core.turns.open_handoff()
        self.follow_ups.spawn(self._replace_with(prompt, active), f"follow-up:{self._agent_id}")

    async def _replace_with(self, prompt: Prompt, active: ActiveTurn | None) -> None:
        """REPLACE with the follow-up. A provider that refuses to stop the running turn keeps
        it (no new turn while the old one may still write: docs/design.md#cancel); the follow-up
        then waits in the queue instead of being lost (nobody is left to be told it was)."""
        client_message_id = f"follow-up-{uuid.uuid4().hex}"
        agent_id = self._agent_id
        try:
            if (
                active is not None
                and await self._control.stop_turn(active) is CancelOutcome.REFUSED
            ):
                await self._core.jobs.call(self._control.close_handoff)
                log.warning("agent %s: turn %s goes on; follow-up queued", agent_id, active.turn_id)
                if_running = IfRunning.QUEUE
            else:
                if_running = IfRunning.REPLACE
            try:
                await self._core.jobs.call(
                    lambda: self._control.start_turn(
                        prompt, client_message_id, if_running, FOLLOW_UP
                    )
                )
            except errors.AgentBusy:
                # Another replacement took the slot meanwhile: the follow-up runs after it.
                await self._core.jobs.call(
                    lambda: self._control.start_turn(
                        prompt, client_message_id, IfRunning.QUEUE, FOLLOW_UP
                    )
                )
        except errors.CorralError as exc:
            log.warning("agent %s: the follow-up prompt did not start: %s", agent_id, exc.message)
