"""WaitForIdle, ClearAttention and DetachAgent through the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, prompt_request, text
from tests.support.daemon import DaemonThread


async def new_agent(stubs: Stubs, cwd: Any, **kw: Any) -> Any:
    return (await stubs.agents.CreateAgent(create_request(str(cwd), **kw))).agent


async def run_turn(stubs: Stubs, agent_id: str, *lines: str) -> None:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    async for _ in call:
        pass


def wait_request(agent_id: str, timeout_s: int | None = None) -> turn_pb.WaitForIdleRequest:
    request = turn_pb.WaitForIdleRequest(agent_id=agent_id)
    if timeout_s is not None:
        request.timeout.CopyFrom(duration_pb2.Duration(seconds=timeout_s))
    return request


async def test_wait_for_idle_answers_at_once_for_an_idle_or_errored_agent(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = await new_agent(stubs, tmp_path)
    idle = await stubs.turns.WaitForIdle(wait_request(agent.id))
    assert idle.status == turn_pb.WAIT_STATUS_IDLE and idle.agent.id == agent.id
    await run_turn(stubs, agent.id, "/fail nope")
    errored = await stubs.turns.WaitForIdle(wait_request(agent.id))
    assert errored.status == turn_pb.WAIT_STATUS_ERROR
    assert errored.agent.lifecycle.errored.error.message == "nope"


async def test_wait_for_idle_returns_when_the_running_turn_ends(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = await new_agent(stubs, tmp_path)
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/sleep 1500", "/reply late"))
    wait = asyncio.ensure_future(stubs.turns.WaitForIdle(wait_request(agent.id)))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 1500)  # the script's /sleep
    assert not wait.done()
    await daemon.advance_async(1500)
    reply = await wait
    assert reply.status == turn_pb.WAIT_STATUS_IDLE
    assert reply.agent.lifecycle.WhichOneof("state") == "idle"


async def test_wait_for_idle_times_out_on_the_daemon_clock(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = await new_agent(stubs, tmp_path)
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/sleep 600000"))
    wait = asyncio.ensure_future(stubs.turns.WaitForIdle(wait_request(agent.id, timeout_s=7)))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 7000)
    await daemon.advance_async(7000)
    reply = await wait
    assert reply.status == turn_pb.WAIT_STATUS_TIMEOUT
    assert reply.agent.lifecycle.WhichOneof("state") == "running"
    await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent.id))


async def test_wait_for_idle_on_a_closed_agent_is_failed_precondition(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent = await new_agent(stubs, tmp_path)
    await stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=agent.id))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.turns.WaitForIdle(wait_request(agent.id))
    assert error_details(info.value).reason == "AGENT_CLOSED"


async def test_clear_attention_clears_the_mark_a_finished_turn_set(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    first, second = await new_agent(stubs, tmp_path), await new_agent(stubs, tmp_path)
    await run_turn(stubs, first.id, "hello")
    marked = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=first.id))).agent
    assert marked.attention.required
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.agents.ClearAttention(
            agent_pb.ClearAttentionRequest(agent_ids=[first.id, "ghost"])
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    still = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=first.id))).agent
    assert still == marked  # nothing cleared when one id is unknown
    reply = await stubs.agents.ClearAttention(
        agent_pb.ClearAttentionRequest(agent_ids=[first.id, second.id])
    )
    assert [a.attention.required for a in reply.agents] == [False, False]
    assert reply.agents[1] == second  # nothing to clear: unchanged, no new updated_at


async def test_a_detached_agent_is_no_longer_a_child(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    parent = await new_agent(stubs, tmp_path)
    child = await new_agent(stubs, tmp_path, labels={"corral.parent-agent-id": parent.id, "k": "v"})
    assert child.parent_agent_id == parent.id
    detached = (
        await stubs.agents.DetachAgent(agent_pb.DetachAgentRequest(agent_id=child.id))
    ).agent
    assert detached.parent_agent_id == "" and dict(detached.labels) == {"k": "v"}
    children = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(parent_agent_id=parent.id))
    assert list(children.agents) == []
