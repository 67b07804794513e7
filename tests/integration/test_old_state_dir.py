"""A daemon started on a state directory written by the corral before the storage format had
messages of its own (tests/unit/store/old_state/: agents as corral.v1.Agent bytes, runs as
JSON) migrates it and serves everything it held through the API: the agents, their timelines,
their queued prompts, the sub-agent runs. Likewise a state directory whose schedules are JSON
text (tests/unit/store/old_state/schedules.db.gz): ListSchedules answers every one of them."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path
from typing import Any

import grpc

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import schedule_service_pb2 as sched_svc_pb
from corral.v1 import schedule_service_pb2_grpc as sched_grpc
from corral.v1 import subagent_service_pb2 as sub_pb
from corral.v1 import subagent_service_pb2_grpc as sub_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.rpc.convert import item_from_pb
from corral_server.rpc.schedule_codec import schedule_to_pb
from corral_server.store.database import DB_FILE
from tests.support.client import Stubs
from tests.support.daemon import DaemonThread
from tests.unit.store.old_state import sample
from tests.unit.store.old_state.schedules_sample import as_restored

OLD_STATES = Path(__file__).parents[1] / "unit" / "store" / "old_state"
OLD_STATE = OLD_STATES / "corral.db.gz"


async def timeline_until(stubs: Stubs, agent_id: str, user_text: str) -> Any:
    """The agent's whole timeline once a user message with `user_text` is in it."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        rows = await stubs.timeline.FetchTimeline(
            tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
        )
        if any(r.item.user_message.text == user_text for r in rows.rows):
            return rows
        assert asyncio.get_running_loop().time() < deadline, f"no {user_text!r} in the timeline"
        await asyncio.sleep(0.02)


async def test_a_daemon_serves_what_an_old_state_directory_holds(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / DB_FILE).write_bytes(gzip.decompress(OLD_STATE.read_bytes()))
    daemon = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            listed = await stubs.agents.ListAgents(svc_pb.ListAgentsRequest(include_archived=True))
            assert [a.id for a in listed.agents] == [a.id for a in sample.AGENTS]
            parent, child, archived = listed.agents
            assert (parent.title, dict(parent.labels)) == (sample.PARENT.title, {"team": "blue"})
            assert child.parent_agent_id == sample.PARENT.id
            assert archived.HasField("archived_at")
            # The turn the restart interrupted ends, and the two queued prompts run, in order,
            # from the content the old directory kept (the long one in its own table).
            rows = await timeline_until(stubs, sample.PARENT.id, "short prompt")
            users = [r.item.user_message.text for r in rows.rows if r.item.HasField("user_message")]
            assert users[1:] == [sample.LONG_PROMPT[0].text, "short prompt"]
            assert rows.epoch == sample.PARENT.epoch
            stored = [item_from_pb(r.item) for r in rows.rows[: len(sample.PARENT_ROWS)]]
            assert stored == [r.item for r in sample.PARENT_ROWS]
            assert rows.rows[0].provider_message_id == sample.PARENT_PROVIDER_MESSAGE_ID[1]

            runs = await sub_grpc.SubagentServiceStub(channel).ListSubagentRuns(
                sub_pb.ListSubagentRunsRequest()
            )
            assert [(r.run_id, r.child_agent_id, r.task) for r in runs.runs] == [
                (r.run_id, r.child_agent_id, r.task) for r in sample.RUNS
            ]
    finally:
        daemon.stop()


async def test_a_daemon_serves_the_schedules_an_old_state_directory_holds_as_json(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / DB_FILE).write_bytes(gzip.decompress((OLD_STATES / "schedules.db.gz").read_bytes()))
    schedules = as_restored()
    # Before any of them is due: what is listed is what was stored, no firing since.
    clock = FakeClock(min(s.created_at_ms for s in schedules) + 1000)
    daemon = DaemonThread(Config(state_dir=state), clock).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            listed = await sched_grpc.ScheduleServiceStub(channel).ListSchedules(
                sched_svc_pb.ListSchedulesRequest()
            )
            assert list(listed.schedules) == [schedule_to_pb(s) for s in schedules]
    finally:
        daemon.stop()
