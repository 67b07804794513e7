"""Sub-agent runs across a daemon restart (docs/design.md#resume): a deferred announce
resumes and is delivered exactly once; runs whose child is gone end as orphans, visibly, and
their requester is told. Daemons run in this process on the FakeClock, one after the other
on the same state directory."""

from __future__ import annotations

from pathlib import Path

import grpc

from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral_server.app import Config
from corral_server.domain.subagents import RunId, SubagentRun
from corral_server.store.database import Database
from corral_server.store.subagent_runs import SqliteRunStore
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.subagents import DEFERRED, DELIVERED, RunWatcher, notices, subagents


def daemon_on(state_dir: Path) -> DaemonThread:
    return DaemonThread(Config(state_dir=state_dir)).start()


async def runs_below(channel: grpc.aio.Channel, agent_id: str) -> list[sub_pb.SubagentRun]:
    request = sub_svc_pb.ListSubagentRunsRequest(agent_id=agent_id, descendants=True)
    return list((await subagents(channel).ListSubagentRuns(request)).runs)


async def test_a_restart_in_the_middle_of_a_deferred_announce_delivers_it_exactly_once(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            root = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            async with RunWatcher(channel) as runs:
                await stubs.turns.SendPrompt(prompt_request(root, "/spawn /spawn /sleep 5000"))
                await runs.until(
                    lambda: (
                        len(runs.of(root)) == 1
                        and runs.of(root)[0].announce_state == DEFERRED
                        and len(runs.of(runs.of(root)[0].child_agent_id)) == 1
                    )
                )
            child = runs.of(root)[0].child_agent_id
    finally:
        first.stop()  # the grandchild is still asleep
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)

            async def all_delivered() -> bool:
                tree = await runs_below(channel, root)
                return len(tree) == 2 and all(r.announce_state == DELIVERED for r in tree)

            async with RunWatcher(channel) as runs:
                await runs.until_async(all_delivered)
            child_run, grandchild_run = await runs_below(channel, root)
            assert grandchild_run.outcome == sub_pb.SUBAGENT_OUTCOME_ERROR
            assert "interrupted by a daemon restart" in grandchild_run.end_reason
            assert [n.run_id for n in await notices(stubs, child)] == [grandchild_run.run_id]
            assert [n.run_id for n in await notices(stubs, root)] == [child_run.run_id]
    finally:
        second.stop()


def stored_run(run_id: str, child: str, requester: str) -> SubagentRun:
    return SubagentRun(RunId(run_id), child, requester, requester, "lost work", 1_000, 1)


async def test_runs_whose_child_is_gone_end_as_orphans_and_their_requester_is_told(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            root = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    finally:
        first.stop()
    # Two runs left by a daemon that died: one whose child agent is gone, one whose child was
    # never created (its slot was claimed).
    database = await Database.open(state, synchronous="NORMAL")
    store = await SqliteRunStore.open(database)
    await store.put(stored_run("run-ghost", "ghost-agent", root))
    await store.put(stored_run("run-unborn", "", root))
    await database.close()
    second = daemon_on(state)
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)

            async def delivered() -> bool:
                runs = await runs_below(channel, root)
                return all(r.announce_state == DELIVERED for r in runs)

            async with RunWatcher(channel) as runs:
                await runs.until_async(delivered)
            ghost, unborn = await runs_below(channel, root)
            for run in (ghost, unborn):
                assert run.outcome == sub_pb.SUBAGENT_OUTCOME_UNKNOWN
                assert run.end_reason.startswith("orphaned: ") and run.HasField("ended_at")
            assert sorted(n.run_id for n in await notices(stubs, root)) == [
                "run-ghost",
                "run-unborn",
            ]
    finally:
        second.stop()
