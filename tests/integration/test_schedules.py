"""Schedules through the wire, on the daemon's FakeClock: days of firings in one advance, each
sent as SendPrompt sends a prompt (or creating an agent), visible as an event and as the
schedule's last run; pause, resume and delete; bad input that creates nothing; a daemon that
was down over firings runs the schedule once at start-up and says so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import schedule_pb2 as sched_pb
from corral.v1 import schedule_service_pb2 as sched_svc_pb
from corral.v1 import schedule_service_pb2_grpc as sched_grpc
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1.server_service_pb2 import GetServerInfoRequest
from corral.v1.server_service_pb2_grpc import ServerServiceStub
from corral_server.app import Config
from corral_server.clock import FakeClock
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def hours(n: int) -> Duration:
    return Duration(seconds=n * 3600)


async def poll(check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Until `check()` answers something truthy (an awaited coroutine's answer)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        got = await check()
        if got:
            return got
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def schedule_of(stub: Any, schedule_id: str) -> sched_pb.Schedule:
    listed = await stub.ListSchedules(sched_svc_pb.ListSchedulesRequest())
    found: list[sched_pb.Schedule] = [s for s in listed.schedules if s.id == schedule_id]
    assert len(found) == 1
    return found[0]


async def runs(stub: Any, schedule_id: str, count: int) -> sched_pb.Schedule:
    """The schedule once it has run `count` times (its firings run on the daemon's loop)."""

    async def ran() -> sched_pb.Schedule | None:
        found = await schedule_of(stub, schedule_id)
        return found if found.run_count >= count else None

    found: sched_pb.Schedule = await poll(ran)
    return found


async def test_an_hourly_schedule_fires_three_days_of_prompts_in_one_advance(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    schedules = sched_grpc.ScheduleServiceStub(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    created = (
        await schedules.CreateSchedule(
            sched_svc_pb.CreateScheduleRequest(
                agent_id=agent.id,
                prompt="/reply tick",
                interval=hours(1),
                if_running=turn_pb.IF_RUNNING_QUEUE,
            )
        )
    ).schedule
    start_ms = daemon.clock.now_ms()
    assert created.next_run_at.ToMilliseconds() == start_ms + HOUR_MS
    await daemon.advance_async(3 * DAY_MS)
    done = await runs(schedules, created.id, 72)
    last = done.last_run
    assert last.due_at.ToMilliseconds() == start_ms + 72 * HOUR_MS
    assert last.outcome in (sched_pb.SCHEDULE_OUTCOME_STARTED, sched_pb.SCHEDULE_OUTCOME_QUEUED)
    assert not last.catch_up and last.agent_id == agent.id
    assert done.next_run_at.ToMilliseconds() == start_ms + 73 * HOUR_MS
    await schedules.DeleteSchedule(sched_svc_pb.DeleteScheduleRequest(schedule_id=created.id))


async def test_a_cron_schedule_in_a_time_zone_creates_an_agent_each_morning(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    schedules = sched_grpc.ScheduleServiceStub(aio_channel)
    spec = svc_pb.CreateAgentRequest(
        provider="scripted", cwd=str(tmp_path), title="morning", labels={"run": tmp_path.name}
    )
    request = sched_svc_pb.CreateScheduleRequest(
        create=spec, prompt="/reply good morning", cron="0 9 * * *", time_zone="Europe/Paris"
    )
    created = (await schedules.CreateSchedule(request)).schedule
    # Read the events after the advance, from here: a stream left unread while the clock
    # moves by days would be ended as stalled.
    info = await ServerServiceStub(aio_channel).GetServerInfo(GetServerInfoRequest())
    first = created.next_run_at.ToMilliseconds()
    assert first % HOUR_MS == 0 and (first // HOUR_MS) % 24 in (7, 8)  # 09:00 Paris: CET or CEST
    await daemon.advance_async(first - daemon.clock.now_ms() + DAY_MS)
    watch = stubs.events.Subscribe(
        event_pb.SubscribeRequest(
            resume_revision=info.head_revision, resume_incarnation=info.incarnation
        )
    )
    fired: list[event_pb.ScheduleFired] = []
    async for response in watch:
        fired += [
            e.schedule_fired
            for e in response.events
            if e.HasField("schedule_fired") and e.schedule_fired.schedule_id == created.id
        ]
        if len(fired) >= 2:
            break
    watch.cancel()
    assert [f.schedule_id for f in fired] == [created.id, created.id]
    assert [f.run.due_at.ToMilliseconds() for f in fired] == [first, first + DAY_MS]
    assert all(f.run.outcome == sched_pb.SCHEDULE_OUTCOME_CREATED for f in fired)
    listed = await stubs.agents.ListAgents(
        svc_pb.ListAgentsRequest(label_selector=f"run={tmp_path.name}")
    )
    assert sorted(a.id for a in listed.agents) == sorted(f.agent_id for f in fired)
    assert all(a.title == "morning" for a in listed.agents)
    await schedules.DeleteSchedule(sched_svc_pb.DeleteScheduleRequest(schedule_id=created.id))


async def test_pause_resume_and_delete(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    schedules = sched_grpc.ScheduleServiceStub(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    request = sched_svc_pb.CreateScheduleRequest(
        agent_id=agent.id, prompt="/reply x", interval=hours(1)
    )
    created = (await schedules.CreateSchedule(request)).schedule
    paused = await schedules.PauseSchedule(
        sched_svc_pb.PauseScheduleRequest(schedule_id=created.id, paused=True)
    )
    assert paused.schedule.paused and not paused.schedule.HasField("next_run_at")
    await daemon.advance_async(5 * HOUR_MS)
    assert (await schedule_of(schedules, created.id)).run_count == 0
    resumed = await schedules.PauseSchedule(
        sched_svc_pb.PauseScheduleRequest(schedule_id=created.id, paused=False)
    )
    now = daemon.clock.now_ms()
    assert resumed.schedule.next_run_at.ToMilliseconds() > now  # from now: no catch-up
    await schedules.DeleteSchedule(sched_svc_pb.DeleteScheduleRequest(schedule_id=created.id))
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await schedules.DeleteSchedule(sched_svc_pb.DeleteScheduleRequest(schedule_id=created.id))
    assert error_details(again.value).reason == "SCHEDULE_NOT_FOUND"
    await daemon.advance_async(5 * HOUR_MS)
    listed = await schedules.ListSchedules(sched_svc_pb.ListSchedulesRequest(agent_id=agent.id))
    assert list(listed.schedules) == []


async def test_a_busy_agent_with_reject_records_the_refusal(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    schedules = sched_grpc.ScheduleServiceStub(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/sleep 86400000"))
    request = sched_svc_pb.CreateScheduleRequest(
        agent_id=agent.id, prompt="/reply x", interval=Duration(seconds=60)
    )
    created = (await schedules.CreateSchedule(request)).schedule
    await daemon.advance_async(60_000)
    last = (await runs(schedules, created.id, 1)).last_run
    assert last.outcome == sched_pb.SCHEDULE_OUTCOME_BUSY and "AGENT_BUSY" in last.error
    await schedules.DeleteSchedule(sched_svc_pb.DeleteScheduleRequest(schedule_id=created.id))
    await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent.id))


@pytest.mark.parametrize(
    ("case", "field", "reason"),
    [
        ("malformed cron", "cron", "INVALID_ARGUMENT"),
        ("cron and interval", "cron", "INVALID_ARGUMENT"),
        ("neither", "cron", "INVALID_ARGUMENT"),
        ("short interval", "interval", "INVALID_ARGUMENT"),
        ("unknown zone", "time_zone", "INVALID_ARGUMENT"),
        ("no target", "agent_id", "INVALID_ARGUMENT"),
        ("two targets", "agent_id", "INVALID_ARGUMENT"),
        ("unknown agent", "", "AGENT_NOT_FOUND"),
        ("no prompt", "prompt", "INVALID_ARGUMENT"),
        ("unknown provider", "create.provider", "INVALID_ARGUMENT"),
    ],
)
async def test_bad_schedules_are_clear_statuses_that_create_nothing(
    aio_channel: grpc.aio.Channel, tmp_path: Path, case: str, field: str, reason: str
) -> None:
    stubs = Stubs.of(aio_channel)
    schedules = sched_grpc.ScheduleServiceStub(aio_channel)
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    good: dict[str, Any] = {"agent_id": agent.id, "prompt": "/reply x", "cron": "*/5 * * * *"}
    spec = svc_pb.CreateAgentRequest(provider="scripted", cwd=str(tmp_path))
    changes: dict[str, dict[str, Any]] = {
        "malformed cron": {"cron": "61 * * * *"},
        "cron and interval": {"interval": hours(1)},
        "neither": {"cron": ""},
        "short interval": {"cron": "", "interval": Duration(seconds=1)},
        "unknown zone": {"time_zone": "Mars/Olympus"},
        "no target": {"agent_id": ""},
        "two targets": {"create": spec},
        "unknown agent": {"agent_id": "f" * 32},
        "no prompt": {"prompt": "  "},
        "unknown provider": {
            "agent_id": "",
            "create": svc_pb.CreateAgentRequest(provider="nope", cwd=str(tmp_path)),
        },
    }
    before = len((await schedules.ListSchedules(sched_svc_pb.ListSchedulesRequest())).schedules)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await schedules.CreateSchedule(
            sched_svc_pb.CreateScheduleRequest(**{**good, **changes[case]})
        )
    details = error_details(failed.value)
    assert details.reason == reason
    assert not field or field in details.fields
    after = (await schedules.ListSchedules(sched_svc_pb.ListSchedulesRequest())).schedules
    assert len(after) == before


async def test_a_daemon_down_over_firings_runs_the_schedule_once_at_start_up(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    clock = FakeClock()
    first = DaemonThread(Config(state_dir=state), clock).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
            request = sched_svc_pb.CreateScheduleRequest(
                agent_id=agent.id,
                prompt="/reply x",
                interval=hours(1),
                if_running=turn_pb.IF_RUNNING_QUEUE,
            )
            created = (
                await sched_grpc.ScheduleServiceStub(channel).CreateSchedule(request)
            ).schedule
    finally:
        first.stop()
    # Five and a half hours later: five firings were missed.
    later = FakeClock(clock.now_ms() + 5 * HOUR_MS + HOUR_MS // 2)
    second = DaemonThread(Config(state_dir=state), later).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            done = await runs(sched_grpc.ScheduleServiceStub(channel), created.id, 1)
            assert done.run_count == 1  # once, not five times
            run = done.last_run
            assert (run.catch_up, run.missed) == (True, 5)
            assert run.due_at == created.next_run_at
            assert run.outcome == sched_pb.SCHEDULE_OUTCOME_STARTED
            now = later.now_ms()
            assert (
                done.next_run_at.ToMilliseconds()
                == created.created_at.ToMilliseconds() + 6 * HOUR_MS
            )
            assert done.next_run_at.ToMilliseconds() > now
    finally:
        second.stop()
