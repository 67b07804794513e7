"""SteerSubagentRun through the wire (docs/design.md#subagents): a running run is
replaced by a new run of the same child whose result alone is announced; steers of one child
by one controller are at least 2 s apart (on the daemon's clock); a steer whose new run cannot
start restores the old run's announce."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread
from tests.support.subagents import (
    DELIVERED,
    KILLED,
    SUPPRESSED,
    RunWatcher,
    notices,
    spawn,
    subagents,
)

LONG = "/sleep 600000"  # ten minutes on the daemon's clock: until steered or killed


async def new_root(stubs: Stubs, cwd: Path) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id)


async def steer(channel: grpc.aio.Channel, run_id: str, message: str) -> sub_pb.SubagentRun:
    request = sub_svc_pb.SteerSubagentRunRequest(run_id=run_id, message=message)
    return (await subagents(channel).SteerSubagentRun(request)).run


def error_metadata(error: grpc.RpcError) -> dict[str, str]:
    status: status_pb2.Status | None = rpc_status.from_call(cast(grpc.Call, error))
    assert status is not None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):  # False for another type of detail
            return dict(info.metadata)
    return {}


async def kill(channel: grpc.aio.Channel, run_id: str) -> None:
    await subagents(channel).KillSubagentRun(sub_svc_pb.KillSubagentRunRequest(run_id=run_id))


async def test_a_steer_replaces_the_run_and_only_the_new_run_is_announced(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    old = await spawn(aio_channel, root, LONG, label="worker")
    async with RunWatcher(aio_channel) as runs:
        new = await steer(aio_channel, old.run_id, "new direction")
        assert new.run_id != old.run_id
        assert (new.child_agent_id, new.requester_agent_id, new.label, new.task) == (
            old.child_agent_id,
            root,
            "worker",
            "new direction",
        )
        await runs.until(
            lambda: new.run_id in runs.runs and runs.runs[new.run_id].announce_state == DELIVERED
        )
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root)
    )
    by_id = {r.run_id: r for r in listed.runs}
    assert list(by_id) == [old.run_id, new.run_id]
    replaced = by_id[old.run_id]
    assert (replaced.outcome, replaced.announce_state) == (KILLED, SUPPRESSED)
    assert replaced.end_reason == f"steer-restart: replaced by run {new.run_id}"
    assert by_id[new.run_id].outcome == sub_pb.SUBAGENT_OUTCOME_OK
    assert by_id[new.run_id].result_text == "You said: new direction"
    assert [n.run_id for n in await notices(stubs, root)] == [new.run_id]  # the old one never


async def test_steers_of_one_child_are_at_least_two_seconds_apart(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    first = await spawn(aio_channel, root, LONG)
    second = await steer(aio_channel, first.run_id, LONG)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await steer(aio_channel, second.run_id, LONG)
    details = error_details(raised.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "STEER_RATE_LIMITED",
    )
    assert error_metadata(raised.value)["retry_after_ms"] == "2000"
    await daemon.advance_async(1999)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await steer(aio_channel, second.run_id, LONG)
    assert error_metadata(raised.value)["retry_after_ms"] == "1"
    await daemon.advance_async(1)
    third = await steer(aio_channel, second.run_id, LONG)  # the refused ones left no mark
    assert third.child_agent_id == first.child_agent_id
    await kill(aio_channel, third.run_id)


async def test_a_steer_whose_new_run_cannot_start_restores_the_old_announce(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    old = await spawn(aio_channel, root, LONG)
    async with RunWatcher(aio_channel) as runs:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await steer(aio_channel, old.run_id, "/no-such-directive")  # refused at the start
        assert error_details(raised.value).code is grpc.StatusCode.INVALID_ARGUMENT
        await runs.until(
            lambda: old.run_id in runs.runs and runs.runs[old.run_id].announce_state == DELIVERED
        )
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root)
    )
    (run,) = listed.runs  # the replacement that never started is forgotten
    assert (run.run_id, run.outcome) == (old.run_id, KILLED)
    assert run.end_reason.startswith("canceled")  # as if it had been interrupted, not steered
    assert [n.run_id for n in await notices(stubs, root)] == [old.run_id]


async def test_a_steer_of_an_ended_run_or_with_a_bad_message_is_refused(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    run = await spawn(aio_channel, root, LONG)
    for message in ("", " ", "x" * 4001):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await steer(aio_channel, run.run_id, message)
        assert error_details(raised.value).fields == ("message",)
    await kill(aio_channel, run.run_id)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await steer(aio_channel, run.run_id, "too late")
    details = error_details(raised.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "SUBAGENT_RUN_ENDED",
    )
