"""A schedule as the scheduler keeps it (replaced whole, never mutated)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

from corral_server.domain.schedules import ScheduleRun
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import IfRunning

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
