"""The `codex` provider through corral's wire, driving the real `codex app-server` (against the
fake OpenAI Responses API): a text turn with its usage, reasoning, a command behind an approval
that RespondToPermission allows and one it declines, a patch behind a file-change approval, a
canceled slow stream, a steered prompt, a model HTTP error, a resumed thread, and no codex
process left after CloseAgent or the daemon's drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.codex import CodexProvider
from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import LEFTOVER_GRACE_S, Place
from tests.support.client import Stubs, create_request, next_message, prompt_request, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer

ALLOW = turn_pb.PERMISSION_BEHAVIOR_ALLOW
DENY = turn_pb.PERMISSION_BEHAVIOR_DENY
COMPLETED, FAILED = 3, 4  # ToolCallStatus on the wire


@pytest.fixture
async def codex_program(fake: FakeModelServer, place: Place) -> AsyncIterator[programs.Program]:
    """Codex's recipe; after the test (and the daemon's drain) no process of it is left."""
    program = programs.codex(place.home, place.cwd, fake.url)
    assert programs.installed("codex"), "codex is not installed: run buildscripts/test"
    try:
        yield program
        await no_process_left(program.tag)
    finally:
        sweep(programs.LEFTOVER_TAG, program.tag)


def provider(program: programs.Program) -> CodexProvider:
    # programs.codex's argv ends with app-server, which the provider appends itself.
    return CodexProvider(program.argv[:-1], program.env, name="codex")


@pytest.fixture
async def stubs(codex_program: programs.Program) -> AsyncIterator[Stubs]:
    daemon = DaemonThread(Config(extra_providers={"codex": provider(codex_program)})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


async def codex_agent(stubs: Stubs, place: Place) -> agent_svc_pb.CreateAgentResponse:
    return await stubs.agents.CreateAgent(create_request(str(place.cwd), provider="codex"))


def stream(stubs: Stubs, agent_id: str, prompt: str) -> Any:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    return stubs.turns.StreamTurn(request)


async def rest_of(call: Any) -> list[turn_pb.StreamTurnResponse]:
    events = []
    while (event := await call.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


def kinds(events: list[turn_pb.StreamTurnResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


def items(events: list[turn_pb.StreamTurnResponse], kind: str) -> list[Any]:
    return [
        getattr(e.row.item, kind)
        for e in events
        if e.HasField("row") and e.row.item.WhichOneof("kind") == kind
    ]


def said(events: list[turn_pb.StreamTurnResponse]) -> str:
    return "".join(m.text for m in items(events, "assistant_message"))


async def until_permission(
    call: grpc.aio.UnaryStreamCall[turn_pb.StreamTurnRequest, turn_pb.StreamTurnResponse],
) -> turn_pb.StreamTurnResponse:
    while (event := await next_message(call)).WhichOneof("event") != "permission_requested":
        pass
    return event


async def no_process_left(tag: str) -> None:
    deadline = asyncio.get_running_loop().time() + LEFTOVER_GRACE_S
    while pids := tagged_processes(programs.LEFTOVER_TAG, tag):
        assert asyncio.get_running_loop().time() < deadline, f"processes left behind: {pids}"
        await asyncio.sleep(0.05)


async def test_a_codex_text_turn_streams_one_message_with_usage_and_close_leaves_no_process(
    stubs: Stubs, place: Place, codex_program: programs.Program
) -> None:
    created = await codex_agent(stubs, place)
    agent_id = created.agent.id
    assert created.agent.provider_session_id  # the codex thread id
    assert created.agent.mode == "untrusted"
    assert tagged_processes(programs.LEFTOVER_TAG, codex_program.tag)  # codex runs
    events = await rest_of(stream(stubs, agent_id, "Hi [[reply: hi over corral]]"))
    assert kinds(events)[0] == "turn_started" and kinds(events)[-1] == "turn_completed"
    assert [e.row.item.WhichOneof("kind") for e in events if e.HasField("row")] == [
        "user_message",
        "assistant_message",
    ]
    assert said(events) == "hi over corral"
    assert events[-1].turn_completed.usage.input_tokens == 10
    assert events[-1].turn_completed.usage.output_tokens == 5

    await stubs.agents.CloseAgent(agent_svc_pb.CloseAgentRequest(agent_id=agent_id))
    await no_process_left(codex_program.tag)


async def test_codex_reasoning_arrives_as_a_reasoning_row_before_the_reply(
    stubs: Stubs, place: Place
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    events = await rest_of(stream(stubs, agent_id, "Ponder [[think: deep thought]] [[reply: 42]]"))
    assert kinds(events)[-1] == "turn_completed"
    rows = [e.row.item.WhichOneof("kind") for e in events if e.HasField("row")]
    assert rows == ["user_message", "reasoning", "assistant_message"]
    assert [r.text for r in items(events, "reasoning")] == ["deep thought"]
    assert said(events) == "42"


async def test_a_codex_command_runs_once_corral_allows_its_approval(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    prompt = "[[shell: touch made-through-corral && echo ran]] [[reply: the command ran]]"
    call = stream(stubs, agent_id, prompt)
    asked = (await until_permission(call)).permission_requested.permission
    assert asked.name == "shell" and "touch made-through-corral" in asked.title
    assert "accept" in [a.id for a in asked.actions]
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert (place.cwd / "made-through-corral").exists()
    tools = items(events, "tool_call")
    assert tools[-1].status == COMPLETED and "ran" in tools[-1].output.string_value
    assert said(events) == "the command ran"
    assert "ran" in fake.model_calls()[1].tool_results[0]


async def test_a_codex_command_corral_declines_never_runs_and_the_turn_goes_on(
    stubs: Stubs, place: Place
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    call = stream(stubs, agent_id, "[[shell: touch nope]] [[reply: fine]]")
    asked = (await until_permission(call)).permission_requested.permission
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=DENY)
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert not (place.cwd / "nope").exists()
    tools = items(events, "tool_call")
    assert tools[-1].status == FAILED and tools[-1].error == "declined"
    assert said(events) == "fine"


async def test_a_codex_patch_waits_for_a_file_change_approval(stubs: Stubs, place: Place) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    target = place.cwd / "patched.txt"
    call = stream(stubs, agent_id, f"[[write: {target}]] [[reply: patched]]")
    asked = (await until_permission(call)).permission_requested.permission
    assert asked.name == "apply_patch" and str(target) in asked.title
    assert [a.id for a in asked.actions] == ["accept", "acceptForSession", "decline", "cancel"]
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id, request_id=asked.id, behavior=ALLOW, selected_action_id="accept"
        )
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert target.read_text() == "written by the fake model\n"
    assert items(events, "tool_call")[-1].status == COMPLETED


async def test_cancel_turn_stops_a_slow_codex_stream_and_the_next_turn_runs(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    call = stream(stubs, agent_id, "Count [[slow]]")
    assert (await call.read()).WhichOneof("event") == "turn_started"
    # Rows of a streamed message reach StreamTurn when it ends, so wait on the model stream.
    await asyncio.to_thread(fake.wait_for, lambda calls: any(c.answer == "text" for c in calls))
    canceled = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    events = await rest_of(call)
    assert canceled.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    assert kinds(events)[-1] == "turn_canceled"
    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished

    again = await rest_of(stream(stubs, agent_id, "Again [[reply: back]]"))
    assert kinds(again)[-1] == "turn_completed" and said(again) == "back"


async def test_a_model_http_error_fails_the_codex_turn_and_the_next_turn_runs(
    stubs: Stubs, place: Place
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    events = await rest_of(stream(stubs, agent_id, "Fail [[error: 500 upstream exploded]]"))
    assert kinds(events)[-1] == "turn_failed"
    error = events[-1].turn_failed.error
    # Codex shows its own words for a 500, not the body's message, and names the kind.
    assert error.code == "AGENT_ERROR" and "(internalServerError)" in error.message
    again = await rest_of(stream(stubs, agent_id, "Again [[reply: back]]"))
    assert kinds(again)[-1] == "turn_completed"


async def test_a_prompt_steered_into_a_running_codex_turn_is_answered_in_that_turn(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = (await codex_agent(stubs, place)).agent.id
    call = stream(stubs, agent_id, "Count [[slow]]")
    turn_id = (await call.read()).turn_started.turn_id
    await asyncio.to_thread(fake.wait_for, lambda calls: any(c.answer == "text" for c in calls))
    steered = await stubs.turns.SendPrompt(
        prompt_request(
            agent_id, "Stop counting [[reply: steered]]", if_running=turn_pb.IF_RUNNING_STEER
        )
    )
    assert steered.disposition == turn_pb.PROMPT_DISPOSITION_STEERED
    assert steered.turn_id == turn_id
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert said(events).endswith("steered")
    # Codex cut the slow stream and asked the model again with the steered prompt.
    assert not fake.model_calls()[0].finished
    assert fake.model_calls()[-1].prompt == "Stop counting [[reply: steered]]"


async def test_the_daemons_drain_closes_a_codex_agent_mid_turn_and_leaves_no_process(
    codex_program: programs.Program, place: Place, fake: FakeModelServer
) -> None:
    daemon = DaemonThread(Config(extra_providers={"codex": provider(codex_program)})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            stubs = Stubs.of(channel)
            agent_id = (await codex_agent(stubs, place)).agent.id
            await stubs.turns.SendPrompt(prompt_request(agent_id, "Count [[slow]]"))
            await asyncio.to_thread(fake.wait_for, lambda calls: len(calls) == 1)
            assert tagged_processes(programs.LEFTOVER_TAG, codex_program.tag)
    finally:
        await asyncio.to_thread(daemon.stop)
    await no_process_left(codex_program.tag)
