"""A schedule's record in the storage format (store/format/schedules.py): every schedule
survives encode and decode exactly, and bytes that cannot be a schedule are refused with a
reason, never half-loaded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.storage.v1 import records_pb2 as storage_pb
from corral_server.domain.schedules import (
    Schedule,
    ScheduleId,
    ScheduleOutcome,
    ScheduleRun,
    Timing,
)
from corral_server.domain.specs import CreateSpec, IfRunning
from corral_server.domain.workspace import WorktreeRequest
from corral_server.store.format.schedules import decode_schedule, encode_schedule

texts = st.text(max_size=20)
ms = st.integers(min_value=0, max_value=2**53)
runs = st.builds(
    ScheduleRun,
    due_ms=ms,
    ran_ms=ms,
    outcome=st.sampled_from(ScheduleOutcome),
    agent_id=texts,
    turn_id=texts,
    error=texts,
    catch_up=st.booleans(),
    missed=st.integers(min_value=0, max_value=2**32 - 1),
)
specs = st.builds(
    CreateSpec,
    provider=texts,
    cwd=texts,
    model=texts,
    mode=texts,
    title=texts,
    labels=st.dictionaries(texts, texts, max_size=3),
    worktree=st.none() | st.builds(WorktreeRequest, texts, texts),
)
schedules = st.builds(
    Schedule,
    id=st.text(min_size=1, max_size=20).map(ScheduleId),
    prompt=st.text(max_size=200),
    timing=st.builds(Timing, texts, st.integers(min_value=0, max_value=2**40), texts),
    if_running=st.sampled_from(IfRunning),
    created_at_ms=ms,
    next_run_ms=st.none() | ms,
    agent_id=texts,
    create=st.none() | specs,
    paused=st.booleans(),
    last_run=st.none() | runs,
    run_count=st.integers(min_value=0, max_value=2**40),
)


@given(schedules)
def test_a_schedule_survives_encode_and_decode(schedule: Schedule) -> None:
    assert decode_schedule(encode_schedule(schedule)) == schedule


def test_a_paused_schedule_keeps_no_next_run_and_an_epoch_one_keeps_zero() -> None:
    paused = Schedule(ScheduleId("s"), "p", Timing(interval_ms=1), IfRunning.QUEUE, 5, None)
    assert decode_schedule(encode_schedule(paused)).next_run_ms is None
    at_zero = Schedule(ScheduleId("s"), "p", Timing(interval_ms=1), IfRunning.QUEUE, 0, 0)
    assert decode_schedule(encode_schedule(at_zero)).next_run_ms == 0


def test_bytes_that_are_not_a_schedule_are_refused() -> None:
    with pytest.raises(ValueError, match="not an encoded schedule"):
        decode_schedule(b"\xff\xff\xff")


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (storage_pb.Schedule(if_running=storage_pb.IF_RUNNING_QUEUE), "without an id"),
        (storage_pb.Schedule(id="s"), r"unknown if_running \(0\)"),
        (
            storage_pb.Schedule(
                id="s", if_running=storage_pb.IF_RUNNING_QUEUE, last_run=storage_pb.ScheduleRun()
            ),
            r"unknown run outcome \(0\)",
        ),
    ],
)
def test_a_schedule_missing_what_it_always_has_is_refused(
    record: storage_pb.Schedule, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_schedule(record.SerializeToString())
