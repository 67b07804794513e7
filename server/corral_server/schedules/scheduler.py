"""The scheduler: every schedule in memory (written through to its store), one timer on the
daemon's clock for the earliest firing, and each firing sent the way SendPrompt sends a prompt
(or a new agent created the way CreateAgent creates one).

1. The timer's callback takes every due schedule, moves its `next_run_ms` to its first firing
   after now (firings the daemon could not keep up with are skipped, never run in a burst),
   starts the firing in a task and re-arms the timer, all before it returns: so a FakeClock
   advanced by days fires every firing in order within one advance.
2. A firing runs after the one before it of the same schedule has finished; it records the
   run (`last_run`, `run_count`), stores the schedule, then publishes `ScheduleFired`.
3. At start-up (`start`), a schedule whose next firing passed while the daemon was down runs
   once, marked `catch_up` with the number of firings it stands for, then goes on from now.

Must not: block the loop (stores write in their threads), or fire while the daemon drains.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Protocol

from corral_server import errors
from corral_server.clock import Clock, TimerHandle
from corral_server.domain.agent import Agent
from corral_server.domain.content import Prompt, TextPart
from corral_server.domain.events import Event, ScheduleFired
from corral_server.domain.schedules import Schedule, ScheduleId, ScheduleOutcome, ScheduleRun
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import Disposition, IfRunning, StartedTurn
from corral_server.schedules.store import InMemorySchedules, ScheduleStore
from corral_server.schedules.timing import firings_between, next_after

log = logging.getLogger(__name__)

MAX_SCHEDULES = 1_000
_OUTCOME = {
    Disposition.STARTED: ScheduleOutcome.STARTED,
    Disposition.QUEUED: ScheduleOutcome.QUEUED,
    Disposition.STEERED: ScheduleOutcome.STEERED,
    Disposition.REPLACED: ScheduleOutcome.REPLACED,
}


class Target(Protocol):
    """What a firing calls: the manager's SendPrompt and CreateAgent."""

    async def send_prompt(
        self, agent_id: str, prompt: Prompt, client_message_id: str, if_running: IfRunning
    ) -> StartedTurn: ...

    async def create(self, spec: CreateSpec) -> tuple[Agent, str]: ...


class ScheduleNotFound(errors.NotFound):
    reason = "SCHEDULE_NOT_FOUND"

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} not found", metadata={"schedule_id": schedule_id}
        )


class Scheduler:
    def __init__(
        self,
        clock: Clock,
        target: Callable[[], Target],
        publish: Callable[[Event], object],
        store: ScheduleStore | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._clock = clock
        self._target = target  # read at each firing: the daemon replaces its manager
        self._publish = publish
        self.store: ScheduleStore = store or InMemorySchedules()
        self._new_id = new_id
        self._schedules: dict[str, Schedule] = {}  # creation order
        self._timer: TimerHandle | None = None
        self._last: dict[str, asyncio.Task[None]] = {}  # each schedule's latest firing
        self._running = False

    # --- reads and changes --------------------------------------------------------------

    def list(self, agent_id: str = "") -> list[Schedule]:
        return [s for s in self._schedules.values() if not agent_id or s.agent_id == agent_id]

    def get(self, schedule_id: str) -> Schedule:
        found = self._schedules.get(schedule_id)
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    def new_id(self) -> ScheduleId:
        return ScheduleId(self._new_id())

    async def add(self, schedule: Schedule) -> Schedule:
        """A checked schedule (validate.py), stored before it is known."""
        if len(self._schedules) >= MAX_SCHEDULES:
            raise errors.ResourceExhausted(
                f"at most {MAX_SCHEDULES} schedules", metadata={"max": str(MAX_SCHEDULES)}
            )
        await self.store.put(schedule)
        self._schedules[schedule.id] = schedule
        self._arm()
        return schedule

    async def pause(self, schedule_id: str, paused: bool) -> Schedule:
        """Pause, or resume from now (no catch-up for the time it was paused)."""
        current = self.get(schedule_id)
        if current.paused == paused:
            return current
        now = self._clock.now_ms()
        following = None if paused else next_after(current.timing, current.created_at_ms, now)
        changed = replace(current, paused=paused, next_run_ms=following)
        await self.store.put(changed)
        self._schedules[schedule_id] = changed
        self._arm()
        return changed

    async def delete(self, schedule_id: str) -> None:
        self.get(schedule_id)
        await self.store.delete(schedule_id)
        self._schedules.pop(schedule_id, None)
        self._arm()

    # --- running ------------------------------------------------------------------------

    async def load(self) -> None:
        """The stored schedules (at start-up, before `start`)."""
        self._schedules = {s.id: s for s in await self.store.load()}

    def start(self) -> None:
        """Serve: run once each schedule whose firing passed while the daemon was down (3),
        then arm the timer."""
        self._running = True
        now = self._clock.now_ms()
        for schedule in list(self._schedules.values()):
            due = schedule.next_run_ms
            if schedule.paused or due is None or due > now:
                continue
            missed = firings_between(schedule.timing, schedule.created_at_ms, due, now)
            log.info(
                "schedule %s: the daemon was down over %d firing(s); running it once now",
                schedule.id,
                missed,
            )
            self._fire(schedule, due, now, catch_up=True, missed=missed)
        self._arm()

    def stop(self) -> None:
        """No firing from now on (the drain)."""
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def settled(self) -> None:
        """Every firing started so far has finished."""
        while pending := [t for t in self._last.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._running:
            return
        dues = [s.next_run_ms for s in self._schedules.values() if s.next_run_ms is not None]
        if dues:
            wait_s = max(0, min(dues) - self._clock.now_ms()) / 1000
            self._timer = self._clock.call_later(wait_s, self._due)

    def _due(self) -> None:
        """The timer's callback (1): synchronous, so that the timer is re-armed before an
        advancing FakeClock looks for its next timer."""
        self._timer = None
        now = self._clock.now_ms()
        for schedule in list(self._schedules.values()):
            due = schedule.next_run_ms
            if not schedule.paused and due is not None and due <= now:
                self._fire(schedule, due, now)
        self._arm()

    def _fire(
        self, schedule: Schedule, due_ms: int, now_ms: int, catch_up: bool = False, missed: int = 0
    ) -> None:
        following = next_after(schedule.timing, schedule.created_at_ms, max(due_ms, now_ms))
        self._schedules[schedule.id] = replace(schedule, next_run_ms=following)
        previous = self._last.get(schedule.id)
        self._last[schedule.id] = self._spawn(
            self._run(previous, schedule, due_ms, catch_up, missed)
        )

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(work)

    async def _run(
        self,
        previous: asyncio.Task[None] | None,
        schedule: Schedule,
        due_ms: int,
        catch_up: bool,
        missed: int,
    ) -> None:
        """One firing (2), after the schedule's previous one."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        run = await self._send(schedule, due_ms)
        run = replace(run, catch_up=catch_up, missed=missed)
        latest = self._schedules.get(schedule.id)
        if latest is not None:  # not deleted meanwhile
            latest = replace(latest, last_run=run, run_count=latest.run_count + 1)
            self._schedules[schedule.id] = latest
            try:
                await self.store.put(latest)
            except errors.CorralError as exc:
                log.warning("schedule %s: its run could not be stored: %s", schedule.id, exc)
        self._publish(ScheduleFired(schedule.id, run))

    async def _send(self, schedule: Schedule, due_ms: int) -> ScheduleRun:
        ran = self._clock.now_ms()
        prompt = (TextPart(schedule.prompt),)
        target = self._target()
        try:
            if schedule.create is None:
                message_id = f"schedule-{schedule.id}-{due_ms}"
                started = await target.send_prompt(
                    schedule.agent_id, prompt, message_id, schedule.if_running
                )
                outcome = _OUTCOME[started.disposition]
                return ScheduleRun(due_ms, ran, outcome, schedule.agent_id, started.turn_id)
            agent, turn_id = await target.create(replace(schedule.create, initial_prompt=prompt))
            return ScheduleRun(due_ms, ran, ScheduleOutcome.CREATED, agent.id, turn_id)
        except errors.AgentBusy as exc:
            return _refused(due_ms, ran, schedule, ScheduleOutcome.BUSY, exc)
        except errors.CorralError as exc:
            return _refused(due_ms, ran, schedule, ScheduleOutcome.FAILED, exc)
        except Exception as exc:
            log.exception("schedule %s: its firing failed", schedule.id)
            return ScheduleRun(
                due_ms, ran, ScheduleOutcome.FAILED, schedule.agent_id, error=f"INTERNAL: {exc}"
            )


def _refused(
    due_ms: int, ran_ms: int, schedule: Schedule, outcome: ScheduleOutcome, exc: errors.CorralError
) -> ScheduleRun:
    error = f"{exc.reason}: {exc.message}"[:1000]
    return ScheduleRun(due_ms, ran_ms, outcome, schedule.agent_id, error=error)
