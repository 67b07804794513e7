"""What every agent's actor is given by the manager: its provider, the stores, the hub, the
clock, the deadlines and the hooks it tells: the manager's `ActorWiring` and the provider."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

from corral_server.clock import Clock
from corral_server.domain import events as ev
from corral_server.domain.agent import Agent
from corral_server.manager.deadlines import CallTimes
from corral_server.manager.hooks import ManagerHooks
from corral_server.manager.presence import PresenceBook
from corral_server.manager.specs import Timeouts
from corral_server.manager.turn_end import TurnCounts
from corral_server.manager.usage import UsageBook
from corral_server.manager.writer import Publisher
from corral_server.providers.base import Provider
from corral_server.records.store import AgentRecords, FinishedTurns
from corral_server.timeline.store import TimelineStore


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorWiring:
    """What the manager gives every actor it makes, the provider apart: `deps(provider)` is
    one actor's `ActorDeps`. The books and hooks are the manager's, shared by all its actors."""

    timeline: TimelineStore
    publisher: Publisher
    clock: Clock
    is_shutting_down: Callable[[], bool]
    timeouts: Timeouts
    # Where snapshots are kept across restarts (None: in memory only).
    records: AgentRecords | None = None
    # Where every finished turn id is kept (None: only the recent ones, in memory).
    finished: FinishedTurns | None = None
    # Clients' presence (Heartbeat), for the notification plan of attention events.
    presence: PresenceBook | None = None
    # Turns started and ended, by outcome (for metrics).
    counts: TurnCounts | None = None
    # Whom to tell when an agent settles: a turn ended and no successor follows (the
    # sub-agent registry's `on_settled`, told on the actor's task: it must not block).
    hooks: ManagerHooks | None = None
    # Completed turns' usage, added up by provider, model and day (None: not kept).
    usage: UsageBook | None = None
    # Every agent process carries it (providers/reaping.py), so a daemon restarted on the
    # same state directory reaps what this one leaves if it is killed.
    daemon_tag: str = ""
    # How long its provider calls took (the manager's, for the metrics).
    call_times: CallTimes = field(default_factory=CallTimes)

    def deps(self, provider: Provider) -> ActorDeps:
        shared = {f.name: getattr(self, f.name) for f in fields(ActorWiring)}
        return ActorDeps(provider=provider, **shared)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorDeps(ActorWiring):
    """One actor's: the wiring and its provider."""

    provider: Provider

    def settled(self, agent: Agent, terminal: ev.TurnTerminal) -> None:
        """Tell the hooks the agent settled (on the actor's task)."""
        if self.hooks is not None and self.hooks.on_settled is not None:
            self.hooks.on_settled(agent, terminal)
