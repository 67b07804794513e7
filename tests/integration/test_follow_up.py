"""A follow-up prompt through the wire (docs/design.md#permissions), on the scripted provider's
`/follow-up TEXT` (a permission request whose ALLOW answer asks for TEXT as a follow-up): the
follow-up starts as a turn replacing the one that asked, with no idle moment between them; a
DENY asks for nothing; a provider that refuses to stop the asking turn keeps it running and
the follow-up waits in the queue."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, next_message, text
from tests.support.daemon import DaemonThread

ALLOW, DENY = turn_pb.PERMISSION_BEHAVIOR_ALLOW, turn_pb.PERMISSION_BEHAVIOR_DENY
SETTLE_MS = 10_000  # tests/conftest.py's settle_s


async def subscribed(stubs: Stubs, agent_id: str) -> Any:
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    return watch


async def asking(stubs: Stubs, watch: Any, agent_id: str, *lines: str) -> Any:
    """Send `lines` as a turn; the permission it asks for (read from `watch`)."""
    await stubs.turns.SendPrompt(turn_pb.SendPromptRequest(agent_id=agent_id, content=text(*lines)))
    while True:
        for event in (await watch.read()).events:
            if event.HasField("permission_requested"):
                return event.permission_requested.permission


async def events_until(watch: Any, done: Any) -> list[Any]:
    seen: list[Any] = []
    while True:
        for event in (await watch.read()).events:
            seen.append(event)
            if done(event):
                return seen


def row_texts(events: list[Any]) -> list[str]:
    """The user and assistant texts of the rows appended among `events`."""
    rows = [e.timeline_row_appended.row for e in events if e.HasField("timeline_row_appended")]
    texts = [r.item.user_message.text or r.item.assistant_message.text for r in rows]
    return [t for t in texts if t]


def states(events: list[Any]) -> list[str]:
    upserts = [e.agent_upserted.agent for e in events if e.HasField("agent_upserted")]
    return [a.lifecycle.WhichOneof("state") for a in upserts]


async def test_an_allowed_follow_up_replaces_the_asking_turn_with_no_idle_between(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = await subscribed(stubs, agent_id)
    asked = await asking(
        stubs, watch, agent_id, "/follow-up /reply carried on", "/sleep 8101", "/reply never"
    )
    first_turn = asked.turn_id
    reply = await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    assert reply.agent.lifecycle.WhichOneof("state") == "running"  # the receipt: no idle
    # Up to the first idle snapshot: it must come only after the follow-up's turn completed.
    events = await events_until(watch, lambda e: states([e]) == ["idle"])
    watch.cancel()
    kinds = [e.WhichOneof("payload") for e in events]
    # The asking turn is canceled (its sleep never ends), the follow-up runs as its successor.
    canceled = kinds.index("turn_canceled")
    assert events[canceled].turn_canceled.turn_id == first_turn
    started = kinds.index("turn_started", canceled)
    second_turn = events[started].turn_started.turn_id
    assert second_turn != first_turn
    completed = kinds.index("turn_completed", started)
    assert events[completed].turn_completed.turn_id == second_turn
    assert row_texts(events[started:]) == ["/reply carried on", "carried on"]
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    prompt = next(r for r in page.rows if r.turn_id == second_turn)
    assert prompt.item.user_message.client_message_id.startswith("follow-up-")
    assert "never" not in [r.item.assistant_message.text for r in page.rows]


async def test_a_denied_follow_up_asks_for_nothing_and_the_turn_goes_on(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = await subscribed(stubs, agent_id)
    asked = await asking(stubs, watch, agent_id, "/follow-up /reply carried on", "/reply own")
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=DENY)
    )
    events = await events_until(watch, lambda e: e.HasField("turn_completed"))
    watch.cancel()
    assert events[-1].turn_completed.turn_id == asked.turn_id
    assert "turn_started" not in [e.WhichOneof("payload") for e in events]
    assert row_texts(events) == ["own"]


async def test_a_follow_up_whose_turn_refuses_to_stop_waits_in_the_queue(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    watch = await subscribed(stubs, agent_id)
    asked = await asking(
        stubs,
        watch,
        agent_id,
        "/refuse-interrupt",
        "/follow-up /reply later",
        "/sleep 18303",
        "/reply own",
    )
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    # The interrupt is refused; the follow-up waits out the settle time, then is queued.
    await asyncio.to_thread(daemon.clock.wait_for_timer, SETTLE_MS)
    await asyncio.to_thread(daemon.clock.wait_for_timer, 18303)
    await daemon.advance_async(SETTLE_MS)
    queued = await events_until(
        watch, lambda e: e.HasField("agent_upserted") and e.agent_upserted.agent.queued_prompts
    )
    agent = queued[-1].agent_upserted.agent
    assert agent.lifecycle.running.active_turn_id == asked.turn_id  # the turn goes on
    assert agent.queued_prompts[0].client_message_id.startswith("follow-up-")
    await daemon.advance_async(18303 - SETTLE_MS)
    events = await events_until(
        watch, lambda e: e.HasField("turn_completed") and e.turn_completed.turn_id != asked.turn_id
    )
    watch.cancel()
    kinds = [e.WhichOneof("payload") for e in events]
    assert "turn_canceled" not in kinds
    assert row_texts(events) == ["own", "/reply later", "later"]
