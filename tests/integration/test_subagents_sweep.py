"""The sweeper through the wire (docs/design.md#subagents): the children of
finished runs with cleanup DELETE are archived after the archive delay, and finished records
are forgotten after the retention period, all on the daemon's clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral_server.subagents.limits import SubagentLimits
from tests import conftest
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.subagents import DELIVERED, RunWatcher, spawn, subagents

SWEEP_S, ARCHIVE_AFTER_S, RETENTION_S = 60, 120, 600


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[DaemonThread]:
    limits = SubagentLimits(
        sweep_interval_s=SWEEP_S, archive_after_s=ARCHIVE_AFTER_S, retention_s=RETENTION_S
    )
    daemon = DaemonThread(replace(conftest.test_config(), subagents=limits)).start()
    yield daemon
    daemon.stop()


async def archived(stubs: Stubs, agent_id: str) -> bool:
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    return agent.HasField("archived_at")


async def known(channel: grpc.aio.Channel, run_id: str) -> bool:
    """Whether the registry still has the run. A steer's first step is a job of the registry's
    queue, so it is answered after every sweep the clock has fired so far."""
    request = sub_svc_pb.SteerSubagentRunRequest(run_id=run_id, message="still there?")
    try:
        await subagents(channel).SteerSubagentRun(request)
    except grpc.aio.AioRpcError as error:
        return error_details(error).reason != "SUBAGENT_RUN_NOT_FOUND"
    raise AssertionError("a finished run was steered")


async def test_delete_children_are_archived_after_the_delay_and_records_forgotten_later(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    async with RunWatcher(aio_channel) as runs:
        gone = await spawn(aio_channel, root, "hello", cleanup=sub_pb.SUBAGENT_CLEANUP_DELETE)
        kept = await spawn(aio_channel, root, "hello", cleanup=sub_pb.SUBAGENT_CLEANUP_KEEP)
        await runs.until(
            lambda: all(
                r.run_id in runs.runs and runs.runs[r.run_id].announce_state == DELIVERED
                for r in (gone, kept)
            )
        )
        await daemon.advance_async(ARCHIVE_AFTER_S * 1000 - 1)  # sweeps, none due yet
        assert not await archived(stubs, gone.child_agent_id)
        await daemon.advance_async(SWEEP_S * 1000)
        await runs.until_async(lambda: archived(stubs, gone.child_agent_id))
    assert not await archived(stubs, kept.child_agent_id)
    assert await known(aio_channel, gone.run_id) and await known(aio_channel, kept.run_id)
    await daemon.advance_async((RETENTION_S - ARCHIVE_AFTER_S) * 1000)
    assert not await known(aio_channel, gone.run_id)  # its child is archived: forgotten
    assert await known(aio_channel, kept.run_id)  # its child is open: the record stays
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root)
    )
    assert [r.run_id for r in listed.runs] == [kept.run_id]
    assert await archived(stubs, gone.child_agent_id)  # the agent itself is kept, archived


async def test_a_busy_delete_child_is_left_for_a_later_sweep(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    async with RunWatcher(aio_channel) as runs:
        run = await spawn(aio_channel, root, "hello", cleanup=sub_pb.SUBAGENT_CLEANUP_DELETE)
        await runs.until(
            lambda: run.run_id in runs.runs and runs.runs[run.run_id].announce_state == DELIVERED
        )
        # Someone gives the finished child more work, longer than the archive delay.
        work_ms = (ARCHIVE_AFTER_S + 2 * SWEEP_S) * 1000
        await stubs.turns.SendPrompt(prompt_request(run.child_agent_id, f"/sleep {work_ms}"))
        await daemon.advance_async(work_ms - 1)
        assert not await archived(stubs, run.child_agent_id)
        await daemon.advance_async(1 + SWEEP_S * 1000)
        await runs.until_async(lambda: archived(stubs, run.child_agent_id))
