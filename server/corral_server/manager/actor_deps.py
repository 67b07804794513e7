"""What every agent's actor is given by the manager: its provider, the stores, the hub, the
clock, the deadlines and the hooks it tells. Built by keyword (manager.py `_deps`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from corral_server.clock import Clock
from corral_server.domain import events as ev
from corral_server.domain.agent import Agent
from corral_server.manager.deadlines import CallTimes
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
