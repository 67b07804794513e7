"""STEER through the wire on a provider that can steer and one that cannot
(docs/design.md#turns): a daemon with the built-in `scripted` (never steers) and a
`ScriptedProvider(can_steer=True)` named `scripted-steer` (a steered prompt's script runs
after the running turn's own steps, in that turn)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.providers.scripted_provider import ScriptedProvider
from tests.support.client import Stubs, create_request, prompt_request, text
from tests.support.daemon import DaemonThread

STEER = turn_pb.IF_RUNNING_STEER


@pytest.fixture(scope="module")
def steering() -> Iterator[DaemonThread]:
    clock = FakeClock()
    provider = ScriptedProvider(clock, name="scripted-steer", can_steer=True)
    daemon = DaemonThread(Config(extra_providers={"scripted-steer": provider}), clock).start()
    yield daemon
    daemon.stop()


async def running(stubs: Stubs, daemon: DaemonThread, cwd: Any, provider: str, ms: int) -> Any:
    """(agent id, StreamTurn call) of a turn that sleeps `ms`, then replies "first"."""
    agent_id = (
        await stubs.agents.CreateAgent(create_request(str(cwd), provider=provider))
    ).agent.id
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(f"/sleep {ms}", "/reply first"))
    )
    await asyncio.to_thread(daemon.clock.wait_for_timer, ms)
    return agent_id, call


async def timeline(stubs: Stubs, agent_id: str) -> list[tuple[str, str]]:
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    return [
        (r.turn_id, r.item.user_message.text or r.item.assistant_message.text) for r in page.rows
    ]


async def test_a_provider_that_can_steer_takes_the_prompt_into_the_running_turn(
    steering: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(steering.address) as channel:
        stubs = Stubs.of(channel)
        agent_id, call = await running(stubs, steering, tmp_path, "scripted-steer", 4401)
        steered = await stubs.turns.SendPrompt(
            prompt_request(agent_id, "/reply second", client_message_id="s-1", if_running=STEER)
        )
        assert steered.disposition == turn_pb.PROMPT_DISPOSITION_STEERED
        assert steered.client_message_id == "s-1"
        await steering.advance_async(4401)
        events = [e async for e in call]
        turn_id = events[0].turn_started.turn_id
        assert steered.turn_id == turn_id
        # One turn: its prompt, the steered prompt, both replies, one end.
        assert [e.WhichOneof("event") for e in events].count("turn_completed") == 1
        assert await timeline(stubs, agent_id) == [
            (turn_id, "/sleep 4401\n/reply first"),
            (turn_id, "/reply second"),
            (turn_id, "first"),
            (turn_id, "second"),
        ]


async def test_a_provider_that_cannot_steer_gets_the_prompt_queued_and_says_so(
    steering: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(steering.address) as channel:
        stubs = Stubs.of(channel)
        agent_id, call = await running(stubs, steering, tmp_path, "scripted", 4402)
        steered = await stubs.turns.SendPrompt(
            prompt_request(agent_id, "/reply second", client_message_id="s-2", if_running=STEER)
        )
        assert steered.disposition == turn_pb.PROMPT_DISPOSITION_QUEUED
        assert (steered.turn_id, steered.client_message_id) == ("", "s-2")
        await steering.advance_async(4402)
        events = [e async for e in call]
        turn_id = events[0].turn_started.turn_id
        await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
        rows = await timeline(stubs, agent_id)
        # The queued prompt ran as a turn of its own, after the running one.
        assert rows[:2] == [(turn_id, "/sleep 4402\n/reply first"), (turn_id, "first")]
        assert [text for _, text in rows[2:]] == ["/reply second", "second"]
        assert rows[2][0] not in ("", turn_id)


async def test_a_steerable_turn_refuses_a_prompt_with_its_own_provider_turn(
    steering: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(steering.address) as channel:
        stubs = Stubs.of(channel)
        agent_id, call = await running(stubs, steering, tmp_path, "scripted-steer", 4403)
        steered = await stubs.turns.SendPrompt(
            prompt_request(agent_id, "/reply second", "/autonomous", if_running=STEER)
        )
        assert steered.disposition == turn_pb.PROMPT_DISPOSITION_QUEUED
        await stubs.turns.RemoveQueuedPrompt(
            turn_pb.RemoveQueuedPromptRequest(
                agent_id=agent_id, client_message_id=steered.client_message_id
            )
        )
        await steering.advance_async(4403)
        assert [e.WhichOneof("event") async for e in call][-1] == "turn_completed"
