"""Queued prompts are durable (docs/design.md#resume): prompts queued behind a turn that a daemon
restart interrupted survive the restart in order, and run, in order, once that turn has ended
(the restored agent opens its provider session for them)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread


async def settled(stubs: Stubs, agent_id: str) -> Any:
    """The agent once it is idle with nothing queued (from a subscription: no polling)."""
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    try:
        async for response in watch:
            for event in response.events:
                agent = event.agent_upserted.agent
                idle = agent.lifecycle.WhichOneof("state") == "idle"
                if event.HasField("agent_upserted") and idle and not agent.queued_prompts:
                    return agent
    finally:
        watch.cancel()
    raise AssertionError("the stream ended")


async def test_prompts_queued_before_a_restart_run_after_it_in_order(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 600000"))
            await asyncio.to_thread(first.clock.wait_for_timer, 600_000)
            for n in (1, 2):
                await stubs.turns.SendPrompt(
                    prompt_request(
                        agent_id,
                        f"/reply queued {n}",
                        client_message_id=f"cm-{n}",
                        if_running=turn_pb.IF_RUNNING_QUEUE,
                    )
                )
    finally:
        first.stop()  # the turn never ends on this daemon; the queue is stored
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.of(channel)
            agent = await settled(stubs, agent_id)
            assert agent.last_error.code == "DAEMON_RESTARTED"  # the turn the restart cut
            page = await stubs.timeline.FetchTimeline(
                tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
            )
            said = [
                r.item.assistant_message.text for r in page.rows if r.item.assistant_message.text
            ]
            assert said == ["queued 1", "queued 2"]
            users = [
                r.item.user_message.client_message_id for r in page.rows if r.item.user_message.text
            ]
            assert users[-2:] == ["cm-1", "cm-2"]
    finally:
        second.stop()
