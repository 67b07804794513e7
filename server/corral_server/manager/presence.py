"""Who is watching, and whom to tell when an agent needs attention (docs/design.md#attention).

`PresenceBook` holds each client's last heartbeat (bounded: the oldest is evicted first).
`notification_plan` is the pure policy, read top to bottom, first match wins:
  1. an agent with a parent never notifies (its parent handles it);
  2. a present client (activity within PRESENCE_MS) looking at the agent -> nobody;
  3. a present client elsewhere -> in-app, to the most recently active present client;
  4. nobody present -> push, except for errors (nobody).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral_server.domain.agent import Agent, AttentionReason
from corral_server.domain.notification import NOBODY, NotificationPlan, NotifyKind

# A client is present while its last activity is this recent (three minutes).
PRESENCE_MS = 180_000
MAX_CLIENTS = 10_000


@dataclass(frozen=True, slots=True)
class Presence:
    """A client's last heartbeat. `active_at_ms`: its last activity (the heartbeat's own time
    when it named none)."""

    client_type: str
    focused_agent_id: str
    app_visible: bool
    active_at_ms: int


def notification_plan(
    agent: Agent, reason: AttentionReason, clients: dict[str, Presence], now_ms: int
) -> NotificationPlan:
    if agent.parent_agent_id:
        return NOBODY
    present = {
        client_id: p for client_id, p in clients.items() if now_ms - p.active_at_ms <= PRESENCE_MS
    }
    if any(p.app_visible and p.focused_agent_id == agent.id for p in present.values()):
        return NOBODY
    if present:
        latest = max(present, key=lambda client_id: present[client_id].active_at_ms)
        return NotificationPlan(NotifyKind.IN_APP, latest)
    if reason is AttentionReason.ERROR:
        return NOBODY
    return NotificationPlan(NotifyKind.PUSH)


class PresenceBook:
    """Each client's last heartbeat, at most MAX_CLIENTS (the oldest heartbeat goes first)."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self._max = max_clients
        self.clients: dict[str, Presence] = {}

    def record(self, client_id: str, presence: Presence) -> None:
        self.clients.pop(client_id, None)
        self.clients[client_id] = presence
        if len(self.clients) > self._max:
            del self.clients[next(iter(self.clients))]

    def plan(self, agent: Agent, reason: AttentionReason, now_ms: int) -> NotificationPlan:
        return notification_plan(agent, reason, self.clients, now_ms)
