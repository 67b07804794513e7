"""Turn bookkeeping shared by the actor and the manager: the active turn and what a
StreamTurn caller receives."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import TypeAlias

from corral_server.domain.agent import Usage
from corral_server.domain.events import TurnCanceled, TurnCompleted, TurnFailed, TurnStarted
from corral_server.domain.timeline import TimelineRow
from corral_server.errors import CorralError

TurnTerminal: TypeAlias = TurnCompleted | TurnFailed | TurnCanceled
# What a StreamTurn caller receives, in order: TurnStarted, rows, the usage (when the
# provider reported it), exactly one terminal.
TurnUpdate: TypeAlias = TurnStarted | TimelineRow | Usage | TurnTerminal


class IfRunning(enum.Enum):
    REJECT = "reject"
    QUEUE = "queue"
    STEER = "steer"
    REPLACE = "replace"


class Disposition(enum.Enum):
    STARTED = "started"
    QUEUED = "queued"
    STEERED = "steered"
    REPLACED = "replaced"


class WaitStatus(enum.Enum):
    IDLE = "idle"
    ERROR = "error"
    PERMISSION = "permission"
    TIMEOUT = "timeout"


class CancelOutcome(enum.Enum):
    NOT_RUNNING = "not_running"
    SETTLED = "settled"
    REFUSED = "refused"


@dataclass(eq=False, slots=True)
class ActiveTurn:
    """The turn an agent is running. Owned by the agent's actor; readers await `settled`."""

    turn_id: str
    foreground: bool
    settled: asyncio.Future[TurnTerminal]
    listeners: list[asyncio.Queue[TurnUpdate | CorralError]] = field(default_factory=list)

    def notify(self, update: TurnUpdate) -> None:
        for listener in self.listeners:
            listener.put_nowait(update)

    def abort(self, error: CorralError) -> None:
        """End every follower's stream with `error` instead of a terminal event."""
        for listener in self.listeners:
            listener.put_nowait(error)


@dataclass(frozen=True, slots=True)
class StartedTurn:
    disposition: Disposition
    turn_id: str
    # Present when the caller asked to follow the turn (StreamTurn).
    updates: asyncio.Queue[TurnUpdate | CorralError] | None = None
