"""Schedules between the scheduler's types and corral.v1 messages."""

from __future__ import annotations

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import schedule_pb2 as sched_pb
from corral.v1 import schedule_service_pb2 as sched_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server import errors
from corral_server.domain.schedules import Schedule, ScheduleOutcome, ScheduleRun, Timing
from corral_server.manager.specs import CreateSpec
from corral_server.manager.turns import IfRunning
from corral_server.rpc.create_codec import spec_from_pb, spec_to_pb
from corral_server.rpc.items import timestamp
from corral_server.schedules.validate import ScheduleRequest

# IF_RUNNING_<NAME> for each IfRunning; unset is REJECT, as SendPrompt takes it.
_IF_RUNNING_PB: dict[IfRunning, turn_pb.IfRunning.ValueType] = {
    m: turn_pb.IfRunning.Value(f"IF_RUNNING_{m.name}") for m in IfRunning
}
_IF_RUNNING = {v: k for k, v in _IF_RUNNING_PB.items()} | {
    turn_pb.IF_RUNNING_UNSPECIFIED: IfRunning.REJECT
}
_OUTCOME_PB = {
    ScheduleOutcome.STARTED: sched_pb.SCHEDULE_OUTCOME_STARTED,
    ScheduleOutcome.QUEUED: sched_pb.SCHEDULE_OUTCOME_QUEUED,
    ScheduleOutcome.STEERED: sched_pb.SCHEDULE_OUTCOME_STEERED,
    ScheduleOutcome.REPLACED: sched_pb.SCHEDULE_OUTCOME_REPLACED,
    ScheduleOutcome.CREATED: sched_pb.SCHEDULE_OUTCOME_CREATED,
    ScheduleOutcome.BUSY: sched_pb.SCHEDULE_OUTCOME_BUSY,
    ScheduleOutcome.FAILED: sched_pb.SCHEDULE_OUTCOME_FAILED,
}


def request_from_pb(msg: sched_svc_pb.CreateScheduleRequest) -> ScheduleRequest:
    if msg.if_running not in _IF_RUNNING:
        raise errors.InvalidArgument.field("if_running", f"unknown value {msg.if_running}")
    interval_ms = 0
    if msg.HasField("interval"):
        interval_ms = msg.interval.seconds * 1000 + msg.interval.nanos // 1_000_000
        if interval_ms <= 0:
            raise errors.InvalidArgument.field("interval", "must be positive")
    timing = Timing(msg.cron, interval_ms, msg.time_zone or "UTC")
    create = _spec_from_pb(msg.create) if msg.HasField("create") else None
    return ScheduleRequest(
        prompt=msg.prompt,
        timing=timing,
        if_running=_IF_RUNNING[msg.if_running],
        agent_id=msg.agent_id,
        create=create,
    )


def _spec_from_pb(msg: agent_svc_pb.CreateAgentRequest) -> CreateSpec:
    if msg.initial_prompt:
        raise errors.InvalidArgument.field("create.initial_prompt", "must be empty: use prompt")
    # Each run is a new agent: the create's request id is not kept (it would return the first).
    return spec_from_pb(msg)


def run_to_pb(run: ScheduleRun) -> sched_pb.ScheduleRun:
    return sched_pb.ScheduleRun(
        due_at=timestamp(run.due_ms),
        ran_at=timestamp(run.ran_ms),
        outcome=_OUTCOME_PB[run.outcome],
        agent_id=run.agent_id,
        turn_id=run.turn_id,
        error=run.error,
        catch_up=run.catch_up,
        missed=run.missed,
    )


def schedule_to_pb(schedule: Schedule) -> sched_pb.Schedule:
    msg = sched_pb.Schedule(
        id=schedule.id,
        agent_id=schedule.agent_id,
        prompt=schedule.prompt,
        cron=schedule.timing.cron,
        time_zone=schedule.timing.time_zone,
        if_running=_IF_RUNNING_PB[schedule.if_running],
        paused=schedule.paused,
        created_at=timestamp(schedule.created_at_ms),
        run_count=schedule.run_count,
    )
    if schedule.create is not None:
        msg.create.CopyFrom(spec_to_pb(schedule.create))
    if schedule.timing.interval_ms:
        msg.interval.FromMilliseconds(schedule.timing.interval_ms)
    if schedule.next_run_ms is not None:
        msg.next_run_at.CopyFrom(timestamp(schedule.next_run_ms))
    if schedule.last_run is not None:
        msg.last_run.CopyFrom(run_to_pb(schedule.last_run))
    return msg
