"""What every agent's actor is given by the manager: its provider, the stores, the hub, the
clock, the deadlines and the hooks it tells: `ActorWiring.deps` builds it by keyword."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
class ActorDeps:
    provider: Provider
    timeline: TimelineStore
    publisher: Publisher
    clock: Clock
    is_shutting_down: Callable[[], bool]
    timeouts: Timeouts
    # Where snapshots are kept across restarts (None: in memory only).
    records: AgentRecords | None = None
    # Where every finished turn id is kept (None: only the recent ones, in memory).
    finished: FinishedTurns | None = None
    # Clients' presence, for the notification plan of attention events.
    presence: PresenceBook | None = None
    # Turns started and ended, by outcome (for metrics).
    counts: TurnCounts | None = None
    # Told (on the actor's task; must not block) when the agent settles: a turn ended and no
    # successor follows (the sub-agent registry ends a child's run here).
    settled: Callable[[Agent, ev.TurnTerminal], None] | None = None
    # Completed turns' usage, added up by provider, model and day (None: not kept).
    usage: UsageBook | None = None
    # The daemon's process tag (providers/reaping.py), given to every session it opens.
    daemon_tag: str = ""
    # How long its provider calls took (the manager's, for the metrics).
    call_times: CallTimes = field(default_factory=CallTimes)


@dataclass(kw_only=True)
class ActorWiring:
    """What the manager gives every actor it makes, the provider apart: `deps(provider)` is
    one actor's `ActorDeps`. The books are the manager's, shared by all its actors."""

    timeline: TimelineStore
    publisher: Publisher
    clock: Clock
    timeouts: Timeouts
    is_shutting_down: Callable[[], bool]
    hooks: ManagerHooks
    records: AgentRecords | None = None
    finished: FinishedTurns | None = None
    # Every agent process carries it (providers/reaping.py), so a daemon restarted on the
    # same state directory reaps what this one leaves if it is killed.
    daemon_tag: str = ""
    # Clients' presence (Heartbeat), for the notification plan of attention events.
    presence: PresenceBook = field(default_factory=PresenceBook)
    # Turns started and ended, by outcome, and how long provider calls took (the metrics).
    counts: TurnCounts = field(default_factory=TurnCounts)
    call_times: CallTimes = field(default_factory=CallTimes)
    # Completed turns' usage (GetUsage, the metrics).
    usage: UsageBook = field(default_factory=UsageBook)

    def deps(self, provider: Provider) -> ActorDeps:
        return ActorDeps(
            provider=provider,
            timeline=self.timeline,
            publisher=self.publisher,
            clock=self.clock,
            is_shutting_down=self.is_shutting_down,
            timeouts=self.timeouts,
            records=self.records,
            finished=self.finished,
            presence=self.presence,
            counts=self.counts,
            usage=self.usage,
            settled=self._settled,
            daemon_tag=self.daemon_tag,
            call_times=self.call_times,
        )

    def _settled(self, agent: Agent, terminal: ev.TurnTerminal) -> None:
        if self.hooks.on_settled is not None:
            self.hooks.on_settled(agent, terminal)
