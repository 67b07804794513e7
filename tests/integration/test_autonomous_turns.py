"""Turns the provider starts by itself, through the wire (docs/design.md#turns), on the scripted
provider's `/autonomous [no-id]` (the lines after it run as a turn the provider starts once the
prompt's turn has ended) and `/terminal-without-id`."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.watch import Watch, idle, is_


async def agent_and_watch(stubs: Stubs, cwd: Any) -> tuple[str, Watch]:
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    return str(agent_id), await Watch(stubs, agent_id).synced()


async def rows(stubs: Stubs, agent_id: str) -> list[tuple[str, str]]:
    """(turn id, text) of every row of the agent's timeline."""
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    return [
        (r.turn_id, r.item.user_message.text or r.item.assistant_message.text) for r in page.rows
    ]


async def running_turn(stubs: Stubs, agent_id: str) -> Any:
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.WhichOneof("state") == "running"
    return agent.lifecycle.running.active_turn_id


async def test_a_turn_the_provider_starts_runs_under_its_own_id_and_keeps_the_agent_busy(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, watch = await agent_and_watch(stubs, tmp_path)
    sent = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/reply first", "/autonomous", "/sleep 4101", "/reply later")
    )
    try:
        started = await watch.until(
            lambda e: e.HasField("turn_started") and e.turn_started.turn_id != sent.turn_id
        )
        auto_id = started.turn_started.turn_id
        assert auto_id.startswith("auto-")
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4101)
        # The prompt's turn ended first; the provider's own turn now runs, as any turn does.
        assert watch.terminals() == [
            ("turn_started", sent.turn_id),
            ("turn_completed", sent.turn_id),
            ("turn_started", auto_id),
        ]
        assert await running_turn(stubs, agent_id) == auto_id
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stubs.turns.SendPrompt(prompt_request(agent_id, "/reply not now"))
        assert error_details(busy.value).reason == "AGENT_BUSY"

        await daemon.advance_async(4101)
        await watch.until(idle)
        assert watch.terminals()[-1] == ("turn_completed", auto_id)
    finally:
        watch.cancel()
    assert (await rows(stubs, agent_id))[1:] == [(sent.turn_id, "first"), (auto_id, "later")]


async def test_a_provider_turn_without_an_id_runs_and_ends_without_one(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, watch = await agent_and_watch(stubs, tmp_path)
    sent = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/reply first", "/autonomous no-id", "/sleep 4102", "/reply anon")
    )
    try:
        await watch.until(is_("turn_started", ""))
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4102)
        assert await running_turn(stubs, agent_id) == ""
        await daemon.advance_async(4102)
        await watch.until(idle)
        # No id is minted for it (corral's rule 4): its start, rows and end name none.
        assert watch.terminals() == [
            ("turn_started", sent.turn_id),
            ("turn_completed", sent.turn_id),
            ("turn_started", ""),
            ("turn_completed", ""),
        ]
    finally:
        watch.cancel()
    assert (await rows(stubs, agent_id))[-1] == ("", "anon")


async def test_a_provider_turn_without_an_id_can_be_canceled(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, watch = await agent_and_watch(stubs, tmp_path)
    await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/reply first", "/autonomous no-id", "/sleep 4103", "/reply never")
    )
    try:
        await asyncio.to_thread(daemon.clock.wait_for_timer, 4103)
        # The interrupt names no turn: "the running turn, whatever its id".
        canceled = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
        assert canceled.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
        await watch.until(is_("turn_canceled"))
        assert watch.terminals()[-2:] == [("turn_started", ""), ("turn_canceled", "")]
    finally:
        watch.cancel()
    await daemon.advance_async(4103)
    assert "never" not in [text for _, text in await rows(stubs, agent_id)]


@pytest.mark.parametrize("autonomous", [False, True])
async def test_a_terminal_without_an_id_borrows_the_running_turns_id(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any, autonomous: bool
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, watch = await agent_and_watch(stubs, tmp_path)
    lines = ("/terminal-without-id", "/reply done")
    script = ("/reply first", "/autonomous", *lines) if autonomous else lines
    sent = await stubs.turns.SendPrompt(prompt_request(agent_id, *script))
    try:
        await watch.until(idle)
        if autonomous:
            await watch.until(idle)  # the provider's own turn, after the prompt's
    finally:
        watch.cancel()
    started = [turn for kind, turn in watch.terminals() if kind == "turn_started"]
    assert started[0] == sent.turn_id and all(started)
    # Each turn ended under the id it started with (docs/design.md#turns), never under "".
    ended = [turn for kind, turn in watch.terminals() if kind == "turn_completed"]
    assert ended == started
