"""The actor's part for pending permissions (seed 000, section 10). On the queue only."""

from __future__ import annotations

from dataclasses import replace

from corral_server import errors
from corral_server.domain import events as ev
from corral_server.domain.agent import (
    Agent,
    Attention,
    AttentionReason,
    PendingPermission,
    PermissionBehavior,
    PermissionResponse,
)
from corral_server.manager import permissions
from corral_server.manager.actor_state import (
    ActorState,
)
from corral_server.manager.deadlines import deadline


class PermissionsPart(ActorState):
    def _request_permission(self, permission: PendingPermission) -> None:
        agent = permissions.with_request(self._snapshot, permission)
        if agent is None:
            return  # a repeated request for a pending id
        event = ev.PermissionRequested(agent.id, permission.turn_id, permission)
        publisher = self._deps.publisher
        requested = publisher.prepare(event)
        # Attention is edge-triggered: none pending -> one, and only if not already set.
        first = not self._snapshot.pending_permissions and not agent.attention.required
        if first:
            now = self._deps.clock.now_ms()
            agent = replace(agent, attention=Attention(True, AttentionReason.PERMISSION, now))
        self._set(agent)
        self._writer.publish((requested,))
        if first:
            attention = self._attention(AttentionReason.PERMISSION)
            self._writer.publish((publisher.prepare(attention),))

    def _resolve_permissions(
        self, request_ids: set[str], behavior: PermissionBehavior | None
    ) -> None:
        """Take requests out of the pending list and say how each ended."""
        ended = [p for p in self._snapshot.pending_permissions if p.id in request_ids]
        if not ended:
            return
        publisher = self._deps.publisher
        resolved = [
            publisher.prepare(ev.PermissionResolved(self.agent.id, p.turn_id, p.id, behavior))
            for p in ended
        ]
        self._set(permissions.without(self._snapshot, request_ids))
        self._writer.publish(resolved)

    async def respond_permission(self, request_id: str, response: PermissionResponse) -> Agent:
        """RespondToPermission: the answer goes to the provider (under a deadline), then the
        request leaves the pending list and PermissionResolved is published. A resolution the
        provider reports meanwhile queues behind this step, so no client sees it before the
        RPC's own receipt."""
        self._ensure_open()
        permission = permissions.find(self._snapshot, request_id)
        permissions.check_answer(permission, response)
        session, deps = self._session, self._deps
        if session is None:
            raise errors.FailedPrecondition(f"agent {self.agent.id!r} has no provider session")
        answer = session.respond_permission(permission.turn_id, request_id, response)
        await deadline(deps.clock, deps.timeouts.interrupt_s, answer, "respond_permission")
        self._resolve_permissions({request_id}, response.behavior)
        return self.agent
