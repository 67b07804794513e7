"""The error grace through the wire (docs/design.md#subagents): a child's failure
ends its run as ERROR only if no success follows within 15 s on the daemon's clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.subagents import DELIVERED, RunWatcher, notices, spawn, subagents

GRACE_MS = 15_000
ERROR = sub_pb.SUBAGENT_OUTCOME_ERROR
OK = sub_pb.SUBAGENT_OUTCOME_OK
UNSET = sub_pb.SUBAGENT_OUTCOME_UNSPECIFIED


async def new_root(stubs: Stubs, cwd: Path) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id)


async def the_run(channel: grpc.aio.Channel, root: str) -> sub_pb.SubagentRun:
    listed = await subagents(channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root)
    )
    (run,) = listed.runs
    return run


async def failed_child(
    channel: grpc.aio.Channel, daemon: DaemonThread, root: str
) -> sub_pb.SubagentRun:
    """A run whose child's turn failed, its error held: the grace's timer is armed."""
    run = await spawn(channel, root, "/fail boom")
    await asyncio.to_thread(daemon.clock.wait_for_timer, GRACE_MS)
    held = await the_run(channel, root)
    assert held.outcome == UNSET and not held.HasField("ended_at")
    return run


async def test_a_childs_error_ends_its_run_only_after_the_grace(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    failed_at = daemon.clock.now_ms()
    run = await failed_child(aio_channel, daemon, root)
    await daemon.advance_async(GRACE_MS - 1)
    assert (await the_run(aio_channel, root)).outcome == UNSET
    assert await notices(stubs, root) == []
    async with RunWatcher(aio_channel) as runs:
        await daemon.advance_async(1)
        await runs.until(
            lambda: run.run_id in runs.runs and runs.runs[run.run_id].announce_state == DELIVERED
        )
    ended = await the_run(aio_channel, root)
    assert (ended.outcome, ended.end_reason, ended.result_text) == (ERROR, "error: boom", "boom")
    assert ended.ended_at.ToMilliseconds() == failed_at  # when it failed, not when confirmed
    assert [n.run_id for n in await notices(stubs, root)] == [run.run_id]


async def test_a_success_within_the_grace_cancels_the_error(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    run = await failed_child(aio_channel, daemon, root)
    async with RunWatcher(aio_channel) as runs:
        await daemon.advance_async(GRACE_MS // 2)
        await stubs.turns.SendPrompt(prompt_request(run.child_agent_id, "try again"))
        await runs.until(
            lambda: run.run_id in runs.runs and runs.runs[run.run_id].announce_state == DELIVERED
        )
        await daemon.advance_async(GRACE_MS)  # the cancelled grace ends nothing
    ended = await the_run(aio_channel, root)
    assert (ended.outcome, ended.result_text) == (OK, "You said: try again")
    assert [n.run_id for n in await notices(stubs, root)] == [run.run_id]
    (notice,) = await notices(stubs, root)
    assert "ended: OK" in notice.text


async def test_a_turn_still_running_when_the_grace_ends_lets_the_run_go_on(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    run = await failed_child(aio_channel, daemon, root)
    await stubs.turns.SendPrompt(prompt_request(run.child_agent_id, "/sleep 60000", "/reply done"))
    await daemon.advance_async(GRACE_MS)
    assert (await the_run(aio_channel, root)).outcome == UNSET  # the start cancelled it
    async with RunWatcher(aio_channel) as runs:
        await daemon.advance_async(60_000 - GRACE_MS)
        await runs.until(
            lambda: run.run_id in runs.runs and runs.runs[run.run_id].announce_state == DELIVERED
        )
    ended = await the_run(aio_channel, root)
    assert (ended.outcome, ended.result_text) == (OK, "done")
    reply = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=run.child_agent_id))
    assert reply.status == turn_pb.WAIT_STATUS_IDLE
