"""QUEUE, STEER and REPLACE through the wire, on the scripted provider (which cannot steer)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import (
    Stubs,
    create_request,
    error_details,
    next_message,
    prompt_request,
    text,
)
from tests.support.daemon import DaemonThread

QUEUE, STEER, REPLACE = (
    turn_pb.IF_RUNNING_QUEUE,
    turn_pb.IF_RUNNING_STEER,
    turn_pb.IF_RUNNING_REPLACE,
)


async def sleeping_agent(stubs: Stubs, daemon: DaemonThread, cwd: Any, ms: int) -> str:
    """An agent whose first turn sleeps `ms` on the daemon's clock (armed when this returns)."""
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    await stubs.turns.SendPrompt(prompt_request(agent_id, f"/sleep {ms}", "/reply first"))
    await asyncio.to_thread(daemon.clock.wait_for_timer, ms)
    return str(agent_id)


async def until_queued(stubs: Stubs, agent_id: str, count: int) -> Any:
    """The agent once it holds `count` queued prompts (from a subscription: no polling)."""
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    try:
        async for response in watch:
            for event in response.events:
                agent = event.agent_upserted.agent
                if event.HasField("agent_upserted") and len(agent.queued_prompts) == count:
                    return agent
    finally:
        watch.cancel()
    raise AssertionError("the stream ended")


async def timeline_rows(stubs: Stubs, agent_id: str) -> list[Any]:
    request = tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    return list((await stubs.timeline.FetchTimeline(request)).rows)


async def get(stubs: Stubs, agent_id: str) -> Any:
    return (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent


async def test_a_queued_prompt_runs_after_the_turn_and_stream_turn_follows_it(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await sleeping_agent(stubs, daemon, tmp_path, 7_001)
    queued = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/reply second", client_message_id="cm-q", if_running=QUEUE)
    )
    assert (queued.disposition, queued.turn_id, queued.client_message_id) == (
        turn_pb.PROMPT_DISPOSITION_QUEUED,
        "",
        "cm-q",
    )
    stream = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("/reply third"), if_running=QUEUE)
    )
    agent = await until_queued(stubs, agent_id, 2)
    assert agent.queued_prompts[0].client_message_id == "cm-q"
    await daemon.advance_async(7_001)
    events = [e async for e in stream]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_completed"
    rows = [e.row for e in events if e.HasField("row")]
    assert rows[0].item.user_message.text == "/reply third"
    assert [
        r.item.assistant_message.text for r in rows if r.item.HasField("assistant_message")
    ] == ["third"]
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    users = [r.item.user_message.text for r in page.rows if r.item.HasField("user_message")]
    assert users == ["/sleep 7001\n/reply first", "/reply second", "/reply third"]
    final = await get(stubs, agent_id)
    assert final.lifecycle.WhichOneof("state") == "idle" and not final.queued_prompts


async def test_remove_queued_prompt_takes_it_out_before_it_starts(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await sleeping_agent(stubs, daemon, tmp_path, 7_002)
    await stubs.turns.SendPrompt(
        prompt_request(agent_id, "never", client_message_id="cm-x", if_running=QUEUE)
    )
    reply = await stubs.turns.RemoveQueuedPrompt(
        turn_pb.RemoveQueuedPromptRequest(agent_id=agent_id, client_message_id="cm-x")
    )
    assert not reply.agent.queued_prompts
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.turns.RemoveQueuedPrompt(
            turn_pb.RemoveQueuedPromptRequest(agent_id=agent_id, client_message_id="cm-x")
        )
    details = error_details(raised.value)
    assert (details.code, details.reason) == (grpc.StatusCode.NOT_FOUND, "QUEUED_PROMPT_NOT_FOUND")
    await daemon.advance_async(7_002)
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    assert "never" not in [r.item.user_message.text for r in page.rows]


async def test_a_steer_the_scripted_provider_cannot_take_is_queued(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await sleeping_agent(stubs, daemon, tmp_path, 7_003)
    steered = await stubs.turns.SendPrompt(prompt_request(agent_id, "also", if_running=STEER))
    assert steered.disposition == turn_pb.PROMPT_DISPOSITION_QUEUED
    assert steered.client_message_id
    await stubs.turns.RemoveQueuedPrompt(
        turn_pb.RemoveQueuedPromptRequest(
            agent_id=agent_id, client_message_id=steered.client_message_id
        )
    )
    await daemon.advance_async(7_003)


async def test_replace_shows_no_idle_moment_to_a_subscriber(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await sleeping_agent(stubs, daemon, tmp_path, 7_004)
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    replaced = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/reply instead", if_running=REPLACE)
    )
    assert replaced.disposition == turn_pb.PROMPT_DISPOSITION_REPLACED and replaced.turn_id
    states: list[str] = []
    done = False
    while not done:
        for event in (await next_message(watch)).events:
            if event.HasField("agent_upserted"):
                states.append(str(event.agent_upserted.agent.lifecycle.WhichOneof("state")))
            done = done or (
                event.HasField("turn_completed")
                and event.turn_completed.turn_id == replaced.turn_id
            )
    watch.cancel()
    # The only idle is the one after the replacing turn completed: none between the turns.
    assert states[-1] == "idle" and states.count("idle") == 1
