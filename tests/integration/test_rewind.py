"""Echo reconciliation and Rewind through the wire (docs/design.md#echo-and-rewind), on the scripted
provider's `/echo` (it reports the prompt back under its own message id, as real agents do)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, next_message, text


async def turn(stubs: Stubs, agent_id: str, *lines: str) -> str:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    events = [e async for e in call]
    return str(events[0].turn_started.turn_id)


async def rows(stubs: Stubs, agent_id: str) -> Any:
    return await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )


async def test_an_echoed_prompt_is_stored_once_and_learns_the_providers_message_id(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    turn_id = await turn(stubs, agent_id, "/echo", "/reply one")
    page = await rows(stubs, agent_id)
    users = [r for r in page.rows if r.item.HasField("user_message")]
    assert len(users) == 1  # the echo is not stored twice
    assert (users[0].seq, users[0].provider_message_id) == (1, f"{turn_id}-user")
    updated = None
    while updated is None:
        for event in (await next_message(watch)).events:
            if event.HasField("timeline_row_updated"):
                updated = event.timeline_row_updated
    watch.cancel()
    assert (updated.seq, updated.provider_message_id, updated.epoch) == (
        1,
        f"{turn_id}-user",
        page.epoch,
    )


async def test_rewind_rebases_to_before_a_confirmed_message(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await turn(stubs, agent_id, "/echo", "/reply one")
    second = await turn(stubs, agent_id, "/echo", "/reply two")
    before = await rows(stubs, agent_id)
    reply = await stubs.turns.Rewind(
        turn_pb.RewindRequest(agent_id=agent_id, message_id=f"{second}-user")
    )
    assert reply.agent.timeline.epoch != before.epoch
    after = await rows(stubs, agent_id)
    kept = [
        r
        for r in before.rows
        if r.seq < next(r.seq for r in before.rows if r.provider_message_id == f"{second}-user")
    ]
    assert [r.seq for r in after.rows] == list(range(1, len(kept) + 1))
    assert [r.item for r in after.rows] == [r.item for r in kept]
    stale = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(
            agent_id=agent_id,
            direction=tl_pb.TIMELINE_DIRECTION_AFTER,
            cursor=timeline_pb.Cursor(epoch=before.epoch, seq=1),
        )
    )
    assert stale.stale_cursor and stale.epoch == after.epoch


async def test_rewind_to_a_message_the_provider_never_confirmed_changes_nothing(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await turn(stubs, agent_id, "no echo here")
    before = await rows(stubs, agent_id)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.turns.Rewind(turn_pb.RewindRequest(agent_id=agent_id, message_id="m-1"))
    details = error_details(raised.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "MESSAGE_NOT_CONFIRMED",
    )
    assert await rows(stubs, agent_id) == before
