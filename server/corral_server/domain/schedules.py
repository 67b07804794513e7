"""A schedule as the scheduler keeps it (replaced whole, never mutated) and what one firing of
it did. schedules/ fires them; the store keeps them (store/format/schedules.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NewType

from corral_server.domain.specs import CreateSpec, IfRunning


class ScheduleOutcome(enum.Enum):
    STARTED = "started"  # SendPrompt's dispositions
    QUEUED = "queued"
    STEERED = "steered"
    REPLACED = "replaced"
    CREATED = "created"  # a new agent, the prompt its first turn
    BUSY = "busy"  # the agent was running and if_running is REJECT: nothing was sent
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    due_ms: int  # the firing time it stands for
    ran_ms: int
    outcome: ScheduleOutcome
    agent_id: str = ""
    turn_id: str = ""
    error: str = ""  # with BUSY and FAILED: the reason and message
    # A run at start-up for the firings the daemon was down over (`missed` of them).
    catch_up: bool = False
    missed: int = 0


ScheduleId = NewType("ScheduleId", str)


@dataclass(frozen=True, slots=True)
class Timing:
    """When it fires: `cron` read in `time_zone`, or every `interval_ms` from its creation."""

    cron: str = ""
    interval_ms: int = 0
    time_zone: str = "UTC"


@dataclass(frozen=True, slots=True)
class Schedule:
    id: ScheduleId
    prompt: str
    timing: Timing
    if_running: IfRunning
    created_at_ms: int
    next_run_ms: int | None  # None while paused
    # The agent prompted at each firing; empty when each firing creates one from `create`.
    agent_id: str = ""
    create: CreateSpec | None = None
    paused: bool = False
    last_run: ScheduleRun | None = None
    run_count: int = 0
