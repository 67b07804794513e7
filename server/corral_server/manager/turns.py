"""Turn bookkeeping shared by the actor and the manager: the active turn, cancel outcomes and
what a prompt's sender is told."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import TypeAlias, assert_never

from corral_server.domain.events import TurnTerminal
from corral_server.domain.specs import IfRunning

__all__ = [
    "ActiveTurn",
    "AutonomousRun",
    "CancelOutcome",
    "Disposition",
    "ForegroundRun",
    "IfRunning",  # a plain value of the domain's: schedules keep one
    "StartedTurn",
    "WaitStatus",
    "owns",
]


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
class ForegroundRun:
    """A turn a client started (SendPrompt / StreamTurn): corral knows its id from
    start_turn, and only its exact id (or none, borrowed) ends it (docs/design.md#turns). Owned by
    the agent's actor; readers await `settled`, resolved with the turn's one terminal event."""

    turn_id: str
    settled: asyncio.Future[TurnTerminal]


@dataclass(eq=False, slots=True)
class AutonomousRun:
    """A turn the provider started by itself, found out from its events: its id may be
    empty, and then every event without another turn's id is its own."""

    turn_id: str
    settled: asyncio.Future[TurnTerminal]


# The turn an agent is running: a discriminated union, matched where the rules differ.
ActiveTurn: TypeAlias = ForegroundRun | AutonomousRun


def owns(run: ActiveTurn, turn_id: str) -> bool:
    """Whether an event naming `turn_id` ("" = none) belongs to `run` (docs/design.md#turns)."""
    match run:
        case ForegroundRun(turn_id=own):
            return turn_id in ("", own)
        case AutonomousRun(turn_id=own):
            return not own or turn_id in ("", own)
        case _:
            assert_never(run)


@dataclass(frozen=True, slots=True)
class StartedTurn:
    disposition: Disposition
    turn_id: str  # empty for a QUEUED prompt
    client_message_id: str = ""
