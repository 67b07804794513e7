"""What the old schedules state directory holds (old_state/schedules.db.gz, schema version 9:
schedules as JSON text), shared by its generator (make_schedules.py, run on that version's
code) and the test that opens it with this code (tests/unit/store/test_old_schedules.py).

The schedule types moved between the two versions, so the values are built from the classes
the caller hands over (`types`: Schedule, Timing, ScheduleId, ScheduleRun, ScheduleOutcome,
CreateSpec, WorktreeRequest, IfRunning): the same fields, read by either version."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def schedules(types: Any) -> tuple[Any, ...]:
    """Every kind of record: an agent's interval schedule, a cron schedule that creates an
    agent in a worktree (after a catch-up run), a paused one whose last run failed, and a
    never-run one that creates a plain agent."""
    t = types
    return (
        t.Schedule(
            id=t.ScheduleId("sched-interval"),
            prompt="check the build",
            timing=t.Timing(interval_ms=3_600_000),
            if_running=t.IfRunning.QUEUE,
            created_at_ms=1_700_000_000_000,
            next_run_ms=1_700_010_800_000,
            agent_id="agent-worker",
            last_run=t.ScheduleRun(
                due_ms=1_700_007_200_000,
                ran_ms=1_700_007_200_015,
                outcome=t.ScheduleOutcome.QUEUED,
                agent_id="agent-worker",
                turn_id="turn-7",
            ),
            run_count=2,
        ),
        t.Schedule(
            id=t.ScheduleId("sched-cron"),
            prompt="résumé du jour ✓\nwith a second line",
            timing=t.Timing(cron="30 9 * * 1-5", time_zone="Europe/Paris"),
            if_running=t.IfRunning.REJECT,
            created_at_ms=1_700_000_000_001,
            next_run_ms=1_700_123_400_000,
            create=t.CreateSpec(
                provider="scripted",
                cwd="/work/repo",
                model="fast",
                mode="plan",
                title="daily summary",
                labels={"team": "infra", "corral/parent": "agent-worker"},
                worktree=t.WorktreeRequest(branch="daily", base="main"),
            ),
            last_run=t.ScheduleRun(
                due_ms=1_700_100_000_000,
                ran_ms=1_700_100_500_000,
                outcome=t.ScheduleOutcome.CREATED,
                agent_id="agent-created",
                turn_id="turn-1",
                catch_up=True,
                missed=4,
            ),
            run_count=9,
        ),
        t.Schedule(
            id=t.ScheduleId("sched-paused"),
            prompt="",
            timing=t.Timing(interval_ms=60_000),
            if_running=t.IfRunning.STEER,
            created_at_ms=1_700_000_000_002,
            next_run_ms=None,
            agent_id="agent-gone",
            paused=True,
            last_run=t.ScheduleRun(
                due_ms=1_700_000_060_000,
                ran_ms=1_700_000_060_001,
                outcome=t.ScheduleOutcome.FAILED,
                error="NOT_FOUND: agent 'agent-gone' not found",
            ),
            run_count=1,
        ),
        t.Schedule(
            id=t.ScheduleId("sched-new"),
            prompt="start over",
            timing=t.Timing(cron="0 0 1 * *"),
            if_running=t.IfRunning.REPLACE,
            created_at_ms=1_700_000_000_002,
            next_run_ms=1_701_388_800_000,
            create=t.CreateSpec(provider="scripted", cwd="/work/other"),
        ),
    )


def as_restored() -> list[Any]:
    """The schedules in this code's types, in the order start-up restores them (by creation
    time, then id). Imported here, not at the top: the generator runs on the old code."""
    from corral_server.domain import schedules as ds
    from corral_server.domain.specs import CreateSpec, IfRunning
    from corral_server.domain.workspace import WorktreeRequest

    types = SimpleNamespace(
        Schedule=ds.Schedule,
        Timing=ds.Timing,
        ScheduleId=ds.ScheduleId,
        ScheduleRun=ds.ScheduleRun,
        ScheduleOutcome=ds.ScheduleOutcome,
        CreateSpec=CreateSpec,
        WorktreeRequest=WorktreeRequest,
        IfRunning=IfRunning,
    )
    return sorted(schedules(types), key=lambda s: (s.created_at_ms, s.id))
