"""What one firing of a schedule did (schedules/ owns the schedules themselves)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
