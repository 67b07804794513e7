"""Sub-agent trees through the wire (docs/design.md#subagents): scripted parents fan out with
`/spawn`, every result reaches its requester exactly once, a child with pending descendants
announces only after them, limits hold under concurrent spawns, kills cascade and archives end
runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL
from corral_server.subagents.limits import SubagentLimits
from tests import conftest
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.subagents import (
    DEFERRED,
    DELIVERED,
    KILLED,
    SUPPRESSED,
    RunWatcher,
    notices,
    spawn,
    subagents,
)

MAX_CHILDREN = 3


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[DaemonThread]:
    limits = SubagentLimits(max_children=MAX_CHILDREN, max_depth=3)
    daemon = DaemonThread(replace(conftest.test_config(), subagents=limits)).start()
    yield daemon
    daemon.stop()


async def new_root(stubs: Stubs, cwd: Path) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id)


async def idle(stubs: Stubs, agent_id: str) -> None:
    reply = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    assert reply.status == turn_pb.WAIT_STATUS_IDLE


async def test_a_parallel_fan_out_announces_every_result_exactly_once(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    async with RunWatcher(aio_channel) as runs:
        await stubs.turns.SendPrompt(
            prompt_request(root, "/spawn alpha", "/spawn beta", "/spawn gamma")
        )
        await runs.until(
            lambda: (
                len(runs.of(root)) == 3
                and all(r.announce_state == DELIVERED for r in runs.of(root))
            )
        )
    await idle(stubs, root)  # the three wake turns have run
    children = runs.of(root)
    assert sorted(r.task for r in children) == ["alpha", "beta", "gamma"]
    assert all(r.outcome == sub_pb.SUBAGENT_OUTCOME_OK for r in children)
    assert sorted(r.result_text for r in children) == [
        f"You said: {t}" for t in ("alpha", "beta", "gamma")
    ]
    got = await notices(stubs, root)
    assert sorted(n.run_id for n in got) == sorted(r.run_id for r in children)  # once each
    for run in children:
        child = (
            await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=run.child_agent_id))
        ).agent
        assert child.parent_agent_id == root and child.labels[PARENT_AGENT_ID_LABEL] == root
    # expects_completion_message (scripted /spawn): the root was woken once per notice.
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root)
    )
    assert (
        len(listed.runs) == 3 and listed.active_descendants == 0 and listed.pending_descendants == 0
    )


async def test_a_child_announces_only_after_its_slow_grandchild(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    async with RunWatcher(aio_channel) as runs:
        # The child spawns a grandchild that sleeps 5 s, and ends its own turn at once.
        await stubs.turns.SendPrompt(prompt_request(root, "/spawn /spawn /sleep 5000"))
        await runs.until(
            lambda: len(runs.of(root)) == 1 and runs.of(root)[0].announce_state == DEFERRED
        )
        child = runs.of(root)[0].child_agent_id
        await runs.until(lambda: len(runs.of(child)) == 1)
        assert await notices(stubs, root) == []  # deferred: nothing announced early
        await daemon.advance_async(5000)  # the grandchild wakes and finishes
        await runs.until(lambda: runs.of(root)[0].announce_state == DELIVERED)
        grandchild_run = runs.of(child)[0]
    assert grandchild_run.announce_state == DELIVERED
    assert [n.run_id for n in await notices(stubs, child)] == [grandchild_run.run_id]
    (notice,) = await notices(stubs, root)
    # The child's result is its answer to the grandchild's notice (it was woken with it).
    assert "You said: Sub-agent" in notice.text and "ended: OK" in notice.text


async def test_a_fast_grandchild_cannot_announce_its_grandparent_early(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    async with RunWatcher(aio_channel) as runs:
        await stubs.turns.SendPrompt(prompt_request(root, "/spawn /spawn quick"))
        await runs.until(
            lambda: len(runs.of(root)) == 1 and runs.of(root)[0].announce_state == DELIVERED
        )
        child = runs.of(root)[0].child_agent_id
        await runs.until(
            lambda: len(runs.of(child)) == 1 and runs.of(child)[0].announce_state == DELIVERED
        )
        grandchild_run, child_run = runs.of(child)[0], runs.of(root)[0]
    assert grandchild_run.ended_at.ToMilliseconds() <= child_run.ended_at.ToMilliseconds()
    assert len(await notices(stubs, child)) == 1
    (notice,) = await notices(stubs, root)
    assert notice.run_id == child_run.run_id and "You said: Sub-agent" in notice.text
    assert await notices(stubs, grandchild_run.child_agent_id) == []


async def test_concurrent_spawns_never_pass_the_children_limit(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    results = await asyncio.gather(
        *(spawn(aio_channel, root, "/sleep 600000") for _ in range(8)), return_exceptions=True
    )
    started = [r for r in results if isinstance(r, sub_pb.SubagentRun)]
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(started) == MAX_CHILDREN and len(refused) == 8 - MAX_CHILDREN
    for error in refused:
        details = error_details(error)
        assert details.code is grpc.StatusCode.FAILED_PRECONDITION
        assert details.reason == "SUBAGENT_CHILDREN_LIMIT"
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root, active_only=True)
    )
    assert len(listed.runs) == MAX_CHILDREN
    for run in started:  # leave nothing running
        await subagents(aio_channel).KillSubagentRun(
            sub_svc_pb.KillSubagentRunRequest(run_id=run.run_id)
        )


async def test_a_spawn_below_the_depth_limit_is_refused(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    parent = await new_root(stubs, tmp_path)
    for depth in (1, 2, 3):
        run = await spawn(aio_channel, parent, "hello")
        assert run.depth == depth
        parent = run.child_agent_id
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await spawn(aio_channel, parent, "hello")
    details = error_details(raised.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "SUBAGENT_DEPTH_LIMIT",
    )


async def sleeping_tree(channel: grpc.aio.Channel, root: str) -> list[sub_pb.SubagentRun]:
    """root -> child -> grandchild -> great-grandchild, every one of them in a long turn."""
    tree: list[sub_pb.SubagentRun] = []
    parent = root
    for _ in range(3):
        run = await spawn(channel, parent, "/sleep 600000")
        tree.append(run)
        parent = run.child_agent_id
    return tree


async def test_a_cascade_kill_stops_a_three_level_tree_without_announces(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    tree = await sleeping_tree(aio_channel, root)
    reply = await subagents(aio_channel).KillSubagentRun(
        sub_svc_pb.KillSubagentRunRequest(run_id=tree[0].run_id, cascade=True)
    )
    assert list(reply.killed_run_ids) == [r.run_id for r in tree]
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root, descendants=True)
    )
    assert [r.run_id for r in listed.runs] == [r.run_id for r in tree]
    for run in listed.runs:
        assert (run.outcome, run.announce_state, run.end_reason) == (KILLED, SUPPRESSED, "killed")
        await idle(stubs, run.child_agent_id)  # its turn was interrupted
    assert listed.active_descendants == 0 and listed.pending_descendants == 0
    for agent_id in (root, *(r.child_agent_id for r in tree)):
        assert await notices(stubs, agent_id) == []


async def test_archiving_a_requester_ends_its_childrens_runs_as_killed(
    aio_channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    tree = await sleeping_tree(aio_channel, root)
    reply = await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=root))
    assert list(reply.archived_agent_ids) == [root, *(r.child_agent_id for r in tree)]
    listed = await subagents(aio_channel).ListSubagentRuns(
        sub_svc_pb.ListSubagentRunsRequest(agent_id=root, descendants=True)
    )
    for run in listed.runs:
        assert (run.outcome, run.announce_state) == (KILLED, SUPPRESSED)
        assert run.end_reason == "requester archived"
    assert await notices(stubs, root) == []


async def test_unknown_runs_and_requesters_are_not_found(aio_channel: grpc.aio.Channel) -> None:
    service = subagents(aio_channel)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await service.KillSubagentRun(sub_svc_pb.KillSubagentRunRequest(run_id="nope"))
    assert error_details(raised.value).reason == "SUBAGENT_RUN_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await spawn(aio_channel, "f" * 32, "hello")
    assert error_details(raised.value).reason == "AGENT_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await service.SteerSubagentRun(sub_svc_pb.SteerSubagentRunRequest(run_id="r", message="x"))
    assert error_details(raised.value).reason == "SUBAGENT_RUN_NOT_FOUND"
