"""ReloadAgent through the wire: the epoch stays, or (rehydrating) moves on and old cursors
answer stale_cursor; subscribers see the timeline reset."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, next_message, text


async def agent_with_a_turn(stubs: Stubs, cwd: Any) -> str:
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    call = stubs.turns.StreamTurn(turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("hi")))
    _ = [event async for event in call]
    return str(agent_id)


async def test_reload_keeps_the_epoch_and_rows_with_a_new_session(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await agent_with_a_turn(stubs, tmp_path)
    before = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    reply = await stubs.agents.ReloadAgent(svc_pb.ReloadAgentRequest(agent_id=agent_id))
    assert reply.agent.timeline.epoch == before.timeline.epoch
    assert reply.agent.timeline.next_seq == before.timeline.next_seq
    assert reply.agent.provider_session_id != before.provider_session_id
    assert reply.agent.lifecycle.WhichOneof("state") == "idle"


async def test_a_rehydrating_reload_makes_old_cursors_stale_and_tells_subscribers(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await agent_with_a_turn(stubs, tmp_path)
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    old_cursor = page.end_cursor
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    request = svc_pb.ReloadAgentRequest(agent_id=agent_id, rehydrate_from_disk=True)
    reply = await stubs.agents.ReloadAgent(request)
    new_epoch = reply.agent.timeline.epoch
    assert new_epoch != old_cursor.epoch
    reset = None
    while reset is None:
        for event in (await next_message(watch)).events:
            if event.HasField("timeline_reset"):
                reset = event.timeline_reset
    watch.cancel()
    assert (reset.agent_id, reset.epoch) == (agent_id, new_epoch)
    stale = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(
            agent_id=agent_id,
            direction=tl_pb.TIMELINE_DIRECTION_AFTER,
            cursor=timeline_pb.Cursor(epoch=old_cursor.epoch, seq=old_cursor.seq),
        )
    )
    assert stale.stale_cursor and stale.reset and stale.epoch == new_epoch
    assert list(stale.rows) == []


async def test_a_single_daemon_refuses_a_reload_on_a_node(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await agent_with_a_turn(stubs, tmp_path)
    before = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stubs.agents.ReloadAgent(svc_pb.ReloadAgentRequest(agent_id=agent_id, node="n2"))
    details = error_details(refused.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT and details.fields == ("node",)
    after = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert after.provider_session_id == before.provider_session_id  # nothing reloaded
