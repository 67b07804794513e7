"""The `acp` provider through corral's wire, driving the real gemini-cli (`gemini --acp`, against
the fake Gemini API) and claude-agent-acp (against the fake Anthropic API): a text turn, a
canceled slow stream, a tool call behind a permission that RespondToPermission allows, a model
HTTP error, and no agent process left after CloseAgent or the daemon's drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.acp_provider import AcpProvider
from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import LEFTOVER_GRACE_S, Place
from tests.support.client import Stubs, create_request, next_message, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer

ALLOW = turn_pb.PERMISSION_BEHAVIOR_ALLOW


AGENTS = {"gemini": programs.gemini, "claude-acp": programs.claude_acp}


@pytest.fixture(params=sorted(AGENTS))
async def acp_program(
    request: pytest.FixtureRequest, fake: FakeModelServer, place: Place
) -> AsyncIterator[programs.Program]:
    """An ACP agent's recipe (gemini-cli, and claude-agent-acp, which the provider was not
    written against); after the test (and the daemon's drain) no process of it is left."""
    program = AGENTS[request.param](place.home, place.cwd, fake.url)
    name = Path(program.argv[0]).name
    assert programs.installed(name), f"{name} is not installed: run buildscripts/test"
    try:
        yield program
        await no_process_left(program.tag)
    finally:
        sweep(programs.LEFTOVER_TAG, program.tag)


@pytest.fixture
async def stubs(acp_program: programs.Program) -> AsyncIterator[Stubs]:
    provider = AcpProvider(acp_program.argv, acp_program.env, name="acp")
    daemon = DaemonThread(Config(extra_providers={"acp": provider})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


async def acp_agent(stubs: Stubs, place: Place) -> str:
    reply = await stubs.agents.CreateAgent(create_request(str(place.cwd), provider="acp"))
    return reply.agent.id


async def rest_of(call: Any) -> list[turn_pb.StreamTurnResponse]:
    events = []
    while (event := await call.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


def kinds(events: list[turn_pb.StreamTurnResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


def item_kinds(events: list[turn_pb.StreamTurnResponse]) -> list[str]:
    return [str(e.row.item.WhichOneof("kind")) for e in events if e.HasField("row")]


async def no_process_left(tag: str) -> None:
    deadline = asyncio.get_running_loop().time() + LEFTOVER_GRACE_S
    while pids := tagged_processes(programs.LEFTOVER_TAG, tag):
        assert asyncio.get_running_loop().time() < deadline, f"processes left behind: {pids}"
        await asyncio.sleep(0.05)


async def test_an_acp_text_turn_streams_rows_and_completes_and_close_leaves_no_process(
    stubs: Stubs, place: Place, acp_program: programs.Program
) -> None:
    agent_id = await acp_agent(stubs, place)
    assert tagged_processes(programs.LEFTOVER_TAG, acp_program.tag)  # the agent runs
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("Hi [[reply: hi over corral]]"))
    )
    events = await rest_of(call)
    assert kinds(events)[0] == "turn_started" and kinds(events)[-1] == "turn_completed"
    assert item_kinds(events) == ["user_message", "assistant_message"]
    said = [e.row.item.assistant_message.text for e in events if e.HasField("row")][1]
    assert said == "hi over corral"

    await stubs.agents.CloseAgent(agent_svc_pb.CloseAgentRequest(agent_id=agent_id))
    await no_process_left(acp_program.tag)


async def test_cancel_turn_stops_a_slow_acp_stream_as_canceled(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = await acp_agent(stubs, place)
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("Count [[slow]]"))
    )
    assert (await next_message(call)).WhichOneof("event") == "turn_started"
    # Rows of a streamed message reach StreamTurn when it ends, so wait on the model stream.
    await asyncio.to_thread(fake.wait_for, lambda calls: any(c.answer == "text" for c in calls))
    canceled = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    events = await rest_of(call)
    assert canceled.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    assert kinds(events)[-1] == "turn_canceled"
    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished


async def test_an_acp_tool_call_waits_for_a_permission_that_corral_allows(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await acp_agent(stubs, place)
    prompt = "[[shell: touch made-through-corral && echo ran]] [[reply: the command ran]]"
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )
    while (event := await next_message(call)).WhichOneof("event") != "permission_requested":
        pass
    asked = event.permission_requested.permission
    allow = next(a for a in asked.actions if a.kind == "allow_once")
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id, request_id=asked.id, behavior=ALLOW, selected_action_id=allow.id
        )
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert (place.cwd / "made-through-corral").exists()
    tools = [e.row.item.tool_call for e in events if e.row.item.HasField("tool_call")]
    assert tools[-1].status == 3  # COMPLETED
    said = "".join(e.row.item.assistant_message.text for e in events if e.HasField("row"))
    assert said == "the command ran"


async def test_a_model_http_error_fails_the_acp_turn_and_the_next_turn_runs(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await acp_agent(stubs, place)
    failing = "Fail [[error: 500 upstream exploded]]"
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(failing))
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_failed"
    assert "upstream exploded" in events[-1].turn_failed.error.message
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("Again [[reply: back]]"))
    )
    assert kinds(await rest_of(call))[-1] == "turn_completed"


async def test_an_acp_thinking_turn_stores_a_reasoning_row_before_the_reply(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await acp_agent(stubs, place)
    prompt = "Ponder [[think: a deep thought]] [[reply: 42]]"
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert item_kinds(events) == ["user_message", "reasoning", "assistant_message"]
    rows = [e.row.item for e in events if e.HasField("row")]
    assert "a deep thought" in rows[1].reasoning.text
    assert rows[2].assistant_message.text == "42"


async def test_an_acp_tool_call_that_corral_denies_does_not_run(stubs: Stubs, place: Place) -> None:
    agent_id = await acp_agent(stubs, place)
    prompt = "[[shell: touch denied-through-corral]] [[reply: fine]]"
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )
    while (event := await next_message(call)).WhichOneof("event") != "permission_requested":
        pass
    asked = event.permission_requested.permission
    reject = next(a for a in asked.actions if a.kind == "reject_once")
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id,
            request_id=asked.id,
            behavior=turn_pb.PERMISSION_BEHAVIOR_DENY,
            selected_action_id=reject.id,
        )
    )
    events = await rest_of(call)
    # gemini-cli ends the turn when a tool is rejected; claude-agent-acp tells the model.
    assert kinds(events)[-1] == "turn_completed"
    assert not (place.cwd / "denied-through-corral").exists()
    resolved = [e.permission_resolved for e in events if e.HasField("permission_resolved")]
    assert [r.behavior for r in resolved] == [turn_pb.PERMISSION_BEHAVIOR_DENY]
    tools = [e.row.item.tool_call for e in events if e.row.item.HasField("tool_call")]
    assert tools and tools[-1].status != 3  # never COMPLETED
