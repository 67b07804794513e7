"""A schedule's record: the domain `Schedule` <-> corral.storage.v1.Schedule bytes.

Every field of the schedule, nothing derived. The enums (if_running, a run's outcome) are
stored as numbers of their own (0 = unset, refused), so renaming a domain value never changes
the disk; an unset `next_run_ms` is the domain's None (a paused schedule).
"""

from __future__ import annotations

from typing import Any

from corral.storage.v1 import records_pb2 as pb
from corral_server.domain.schedules import (
    Schedule,
    ScheduleId,
    ScheduleOutcome,
    ScheduleRun,
    Timing,
)
from corral_server.domain.specs import CreateSpec, IfRunning
from corral_server.domain.workspace import WorktreeRequest
from corral_server.store.format.common import known, parse

_SAME = ("id", "prompt", "created_at_ms", "agent_id", "paused", "run_count")
_TIMING = ("cron", "interval_ms", "time_zone")
_RUN = ("due_ms", "ran_ms", "agent_id", "turn_id", "error", "catch_up", "missed")
_NEW_AGENT = ("provider", "cwd", "model", "mode", "title")

_IF_RUNNING = {
    IfRunning.REJECT: pb.IF_RUNNING_REJECT,
    IfRunning.QUEUE: pb.IF_RUNNING_QUEUE,
    IfRunning.STEER: pb.IF_RUNNING_STEER,
    IfRunning.REPLACE: pb.IF_RUNNING_REPLACE,
}
_OUTCOME = {
    ScheduleOutcome.STARTED: pb.SCHEDULE_OUTCOME_STARTED,
    ScheduleOutcome.QUEUED: pb.SCHEDULE_OUTCOME_QUEUED,
    ScheduleOutcome.STEERED: pb.SCHEDULE_OUTCOME_STEERED,
    ScheduleOutcome.REPLACED: pb.SCHEDULE_OUTCOME_REPLACED,
    ScheduleOutcome.CREATED: pb.SCHEDULE_OUTCOME_CREATED,
    ScheduleOutcome.BUSY: pb.SCHEDULE_OUTCOME_BUSY,
    ScheduleOutcome.FAILED: pb.SCHEDULE_OUTCOME_FAILED,
}
_IF_RUNNING_BACK = {stored: value for value, stored in _IF_RUNNING.items()}
_OUTCOME_BACK = {stored: value for value, stored in _OUTCOME.items()}


def encode_schedule(schedule: Schedule) -> bytes:
    record = pb.Schedule(**{name: getattr(schedule, name) for name in _SAME})
    for name in _TIMING:
        setattr(record, name, getattr(schedule.timing, name))
    record.if_running = _IF_RUNNING[schedule.if_running]
    if schedule.next_run_ms is not None:
        record.next_run_ms = schedule.next_run_ms
    if (spec := schedule.create) is not None:
        record.create.CopyFrom(_new_agent(spec))
    if (run := schedule.last_run) is not None:
        record.last_run.CopyFrom(pb.ScheduleRun(**{name: getattr(run, name) for name in _RUN}))
        record.last_run.outcome = _OUTCOME[run.outcome]
    return record.SerializeToString()


def _new_agent(spec: CreateSpec) -> pb.NewAgent:
    stored = pb.NewAgent(**{name: getattr(spec, name) for name in _NEW_AGENT})
    stored.labels.update(spec.labels)
    if spec.worktree is not None:
        stored.worktree.branch = spec.worktree.branch
        stored.worktree.base = spec.worktree.base
    return stored


def decode_schedule(data: bytes) -> Schedule:
    """The schedule in `data`; ValueError when it is not one."""
    r = parse(pb.Schedule, data, "schedule")
    if not r.id:
        raise ValueError("a schedule without an id")
    fields: dict[str, Any] = {name: getattr(r, name) for name in _SAME}
    run = None
    if r.HasField("last_run"):
        lr = r.last_run
        outcome = known(_OUTCOME_BACK, lr.outcome, "schedule", "run outcome")
        run = ScheduleRun(**{name: getattr(lr, name) for name in _RUN}, outcome=outcome)
    return Schedule(
        **{**fields, "id": ScheduleId(r.id)},
        timing=Timing(**{name: getattr(r, name) for name in _TIMING}),
        if_running=known(_IF_RUNNING_BACK, r.if_running, "schedule", "if_running"),
        next_run_ms=r.next_run_ms if r.HasField("next_run_ms") else None,
        create=_create_spec(r.create) if r.HasField("create") else None,
        last_run=run,
    )


def _create_spec(stored: pb.NewAgent) -> CreateSpec:
    tree = stored.worktree
    return CreateSpec(
        **{name: getattr(stored, name) for name in _NEW_AGENT},
        labels=dict(stored.labels),
        worktree=WorktreeRequest(tree.branch, tree.base) if stored.HasField("worktree") else None,
    )
