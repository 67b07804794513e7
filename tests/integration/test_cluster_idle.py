"""WaitForIdle on a cluster node (docs/cluster.md#read-model): the owner answers IDLE only once
every batch of the turn is applied to its own read model, so the agent it answers with, and a
page read right after, hold every row of the turn (the bench's C1 once saw IDLE with 8,000 rows
still in flight). The race: a row the coalescer's window handed to the stream without waiting
(its 60 ms passed), and then the turn's end, which found no pending row to wait for."""

from __future__ import annotations

import asyncio
from pathlib import Path

from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.integration.test_cluster_replica import Nodes, stubs_of
from tests.support.client import create_request, prompt_request
from tests.support.nats import NatsCluster

SLEEP_MS = 1_000


async def test_wait_for_idle_answers_once_the_turns_last_batch_is_applied_on_the_owner(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    nodes = Nodes(tmp_path, nats_cluster)
    owner = nodes.start("a")
    try:
        async with stubs_of(owner) as stubs:
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            script = f"/reply the turn's only reply\n/sleep {SLEEP_MS}"
            await stubs.turns.SendPrompt(prompt_request(agent_id, script))
            await asyncio.to_thread(owner.clock.wait_for_timer, SLEEP_MS)
            # The window flushes the reply (sent, not waited for), then the sleep ends the turn.
            await owner.advance_async(SLEEP_MS)
            reply = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            assert reply.status == turn_pb.WAIT_STATUS_IDLE
            assert reply.agent.timeline.next_seq == 3  # the prompt's row and the reply's
            tail = tl_pb.FetchTimelineRequest(
                agent_id=agent_id, direction=tl_pb.TIMELINE_DIRECTION_TAIL, limit=1
            )
            page = await stubs.timeline.FetchTimeline(tail)
            assert [row.seq for row in page.rows] == [2]
    finally:
        nodes.stop("a")
