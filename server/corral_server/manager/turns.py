"""Turn bookkeeping shared by the actor and the manager: the active turn, cancel outcomes and
what a prompt's sender is told."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from corral_server.domain.events import TurnTerminal


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
    """The turn an agent is running. Owned by the agent's actor; readers await `settled`,
    which resolves with the turn's one terminal event."""

    turn_id: str
    foreground: bool
    settled: asyncio.Future[TurnTerminal]


@dataclass(frozen=True, slots=True)
class StartedTurn:
    disposition: Disposition
    turn_id: str  # empty for a QUEUED prompt
    client_message_id: str = ""
