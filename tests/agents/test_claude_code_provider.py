"""The `claude-code` provider through corral's wire, driving the real Claude Code (`claude -p`,
stream-json, against the fake Anthropic API): text and thinking turns, tool calls behind
permissions that RespondToPermission allows or denies, a canceled slow stream, a model HTTP
error, a session resumed in a new process after the daemon stopped, and no claude process
(nor a command it left in the background) after CloseAgent or the daemon's drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.domain.content import TextPart
from corral_server.providers.base import (
    ProviderEvent,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.claude_code import ClaudeCodeProvider
from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import LEFTOVER_GRACE_S, Place
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer

ALLOW = turn_pb.PERMISSION_BEHAVIOR_ALLOW
DENY = turn_pb.PERMISSION_BEHAVIOR_DENY
COMPLETED, FAILED = 3, 4  # corral.v1.ToolCallStatus


@dataclass(slots=True)
class Claude:
    program: programs.Program
    provider: ClaudeCodeProvider
    daemon: DaemonThread | None = None
    stubs: Stubs | None = None


@pytest.fixture
async def claude(fake: FakeModelServer, place: Place) -> AsyncIterator[Claude]:
    """The provider over the pinned claude binary; after the test (and the daemon's drain)
    no process of it is left, without help from the test's own sweep."""
    program = programs.claude_code(place.home, place.cwd, fake.url)
    assert programs.installed("claude"), "claude is not installed: run buildscripts/test"
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    try:
        yield Claude(program, provider)
        await no_process_left(program.tag)
    finally:
        sweep(programs.LEFTOVER_TAG, program.tag)


@pytest.fixture
async def stubs(claude: Claude) -> AsyncIterator[Stubs]:
    daemon = DaemonThread(Config(extra_providers={"claude-code": claude.provider})).start()
    claude.daemon = daemon
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        if not daemon.loop.is_closed():  # a test may have stopped it (drain, restart)
            daemon.stop()


async def claude_agent(stubs: Stubs, place: Place, mode: str = "") -> str:
    request = create_request(
        str(place.cwd), provider="claude-code", model=programs.CLAUDE_MODEL, mode=mode
    )
    reply = await stubs.agents.CreateAgent(request)
    return reply.agent.id


def stream(stubs: Stubs, agent_id: str, prompt: str) -> Any:
    return stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    )


async def rest_of(call: Any) -> list[turn_pb.StreamTurnResponse]:
    events = []
    while (event := await call.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


def kinds(events: list[turn_pb.StreamTurnResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


def rows(events: list[turn_pb.StreamTurnResponse], kind: str) -> list[Any]:
    return [
        getattr(e.row.item, kind)
        for e in events
        if e.HasField("row") and e.row.item.WhichOneof("kind") == kind
    ]


async def until_permission(call: Any) -> Any:
    while (event := await call.read()).WhichOneof("event") != "permission_requested":
        assert event is not grpc.aio.EOF
    return event.permission_requested.permission


async def no_process_left(tag: str) -> None:
    deadline = asyncio.get_running_loop().time() + LEFTOVER_GRACE_S
    while pids := tagged_processes(programs.LEFTOVER_TAG, tag):
        assert asyncio.get_running_loop().time() < deadline, f"processes left behind: {pids}"
        await asyncio.sleep(0.05)


async def test_a_text_turn_and_a_thinking_turn_stream_rows_with_usage_and_the_agents_session_id(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = await claude_agent(stubs, place)
    events = await rest_of(stream(stubs, agent_id, "Say hi [[reply: hi over corral]]"))
    assert kinds(events)[0] == "turn_started" and kinds(events)[-1] == "turn_completed"
    assert [m.text for m in rows(events, "assistant_message")] == ["hi over corral"]
    assert events[-1].turn_completed.usage.output_tokens > 0

    events = await rest_of(
        stream(stubs, agent_id, "Ponder [[think: a deep thought]] [[reply: 42]]")
    )
    assert kinds(events)[-1] == "turn_completed"
    assert [r.text for r in rows(events, "reasoning")] == ["a deep thought"]
    assert [m.text for m in rows(events, "assistant_message")] == ["42"]
    # Thinking and text of one API message: one provider message id, two rows.
    ids = {e.row.provider_message_id for e in events if e.HasField("row")} - {""}
    assert len(ids) == 1 and ids.pop().startswith("msg_fake_")

    agent = (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.provider_session_id  # Claude Code's own id, as its result lines report it
    calls = fake.model_calls()
    assert all(c.body["model"] == programs.CLAUDE_MODEL for c in calls)


async def test_a_tool_call_waits_for_a_permission_that_corral_allows(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await claude_agent(stubs, place)
    call = stream(stubs, agent_id, "[[shell: touch made-by-claude]] [[reply: the command ran]]")
    asked = await until_permission(call)
    assert asked.name == "Bash" and asked.kind == "execute"
    assert [a.kind for a in asked.actions] == ["allow_once", "reject_once"]
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert (place.cwd / "made-by-claude").exists()
    tool = rows(events, "tool_call")[-1]
    assert tool.name == "Bash" and tool.status == COMPLETED
    assert "touch made-by-claude" in str(tool.input)
    assert [m.text for m in rows(events, "assistant_message")] == ["the command ran"]


async def test_a_denied_tool_call_fails_with_the_answers_message_and_the_turn_completes(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = await claude_agent(stubs, place)
    target = place.cwd / "no.txt"
    call = stream(stubs, agent_id, f"[[write: {target}]] [[reply: fine, not written]]")
    asked = await until_permission(call)
    assert asked.name == "Write" and asked.kind == "edit"
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id, request_id=asked.id, behavior=DENY, message="not today"
        )
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    assert not target.exists()
    tool = rows(events, "tool_call")[-1]
    assert tool.status == FAILED and "not today" in tool.error
    assert "not today" in fake.model_calls()[1].tool_results[0]


async def test_an_agent_in_accept_edits_mode_writes_without_asking(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await claude_agent(stubs, place, mode="acceptEdits")
    target = place.cwd / "yes.txt"
    events = await rest_of(stream(stubs, agent_id, f"[[write: {target}]] [[reply: written]]"))
    assert kinds(events)[-1] == "turn_completed"
    assert "permission_requested" not in kinds(events)
    assert target.read_text() == "written by the fake model\n"


async def test_cancel_turn_cuts_a_slow_claude_stream_and_the_next_turn_runs(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = await claude_agent(stubs, place)
    call = stream(stubs, agent_id, "Count slowly [[slow]]")
    assert (await call.read()).WhichOneof("event") == "turn_started"
    await asyncio.to_thread(fake.wait_for, lambda calls: any(c.answer == "text" for c in calls))
    canceled = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    events = await rest_of(call)
    assert canceled.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    assert kinds(events)[-1] == "turn_canceled"
    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished

    events = await rest_of(stream(stubs, agent_id, "Again [[reply: back]]"))
    assert kinds(events)[-1] == "turn_completed"


async def test_a_model_http_error_fails_the_turn_with_the_apis_message_and_the_next_turn_runs(
    stubs: Stubs, place: Place
) -> None:
    agent_id = await claude_agent(stubs, place)
    events = await rest_of(stream(stubs, agent_id, "Fail [[error: 500 upstream exploded]]"))
    assert kinds(events)[-1] == "turn_failed"
    error = events[-1].turn_failed.error
    assert "upstream exploded" in error.message and error.code == "MODEL_ERROR"
    assert rows(events, "assistant_message") == []  # the API error is the turn's error only

    events = await rest_of(stream(stubs, agent_id, "Again [[reply: back]]"))
    assert kinds(events)[-1] == "turn_completed"


async def test_close_agent_leaves_no_claude_process_nor_its_background_command(
    stubs: Stubs, place: Place, claude: Claude
) -> None:
    agent_id = await claude_agent(stubs, place)
    call = stream(
        stubs, agent_id, "[[shell: (sleep 300 > /dev/null 2>&1 &); echo started]] [[reply: ok]]"
    )
    asked = await until_permission(call)
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    assert kinds(await rest_of(call))[-1] == "turn_completed"
    assert len(tagged_processes(programs.LEFTOVER_TAG, claude.program.tag)) >= 2  # claude, sleep

    await stubs.agents.CloseAgent(agent_svc_pb.CloseAgentRequest(agent_id=agent_id))
    await no_process_left(claude.program.tag)


async def test_the_daemons_drain_closes_a_claude_session_in_the_middle_of_a_turn(
    stubs: Stubs, place: Place, claude: Claude, fake: FakeModelServer
) -> None:
    agent_id = await claude_agent(stubs, place)
    call = stream(stubs, agent_id, "Count slowly [[slow]]")
    assert (await call.read()).WhichOneof("event") == "turn_started"
    await asyncio.to_thread(fake.wait_for, lambda calls: any(c.answer == "text" for c in calls))
    assert tagged_processes(programs.LEFTOVER_TAG, claude.program.tag)

    assert claude.daemon is not None
    await asyncio.to_thread(claude.daemon.stop)
    await no_process_left(claude.program.tag)


async def test_a_session_resumes_in_a_new_claude_process_after_the_daemon_stopped(
    stubs: Stubs, place: Place, claude: Claude, fake: FakeModelServer
) -> None:
    agent_id = await claude_agent(stubs, place)
    events = await rest_of(stream(stubs, agent_id, "First [[reply: one]]"))
    assert kinds(events)[-1] == "turn_completed"
    agent = (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert claude.daemon is not None
    await asyncio.to_thread(claude.daemon.stop)
    await no_process_left(claude.program.tag)

    # What the manager does after a restart: a session for the stored provider session id.
    seen: list[ProviderEvent] = []
    ended = asyncio.Event()

    def sink(event: ProviderEvent) -> None:
        seen.append(event)
        if isinstance(event, ProviderTurnCompleted | ProviderTurnFailed | ProviderTurnCanceled):
            ended.set()

    assert (agent.model, agent.mode) == (programs.CLAUDE_MODEL, "default")
    config = SessionConfig(
        agent_id,
        str(place.cwd),
        model=agent.model,
        mode=agent.mode,
        resume_session_id=agent.provider_session_id,
    )
    session = await claude.provider.create_session(config, sink)
    try:
        await session.start_turn((TextPart("Second [[reply: two]]"),))
        await asyncio.wait_for(ended.wait(), 30)
        assert isinstance(seen[-1], ProviderTurnCompleted), seen[-1]
        assert session.session_id == agent.provider_session_id
    finally:
        await session.close()
    roles = [m["role"] for m in fake.model_calls()[-1].body["messages"]]
    assert roles == ["user", "assistant", "user"]  # the first turn came back with the session


async def test_resuming_an_unknown_session_fails_the_create_with_claudes_reason(
    claude: Claude, place: Place
) -> None:
    config = SessionConfig(
        "agent", str(place.cwd), resume_session_id="00000000-0000-4000-8000-000000000000"
    )
    with pytest.raises(Exception, match="No conversation found") as failed:
        await claude.provider.create_session(config, lambda _event: None)
    assert type(failed.value).__name__ == "ClaudeStartFailed"


def test_the_provider_reports_its_kind_modes_and_a_missing_command(tmp_path: Path) -> None:
    info = ClaudeCodeProvider([str(programs.BIN / "claude")], {}).info()
    assert (info.kind, info.available, info.can_steer) == ("claude-code", True, False)
    assert [m.id for m in info.modes][:2] == ["default", "acceptEdits"]
    missing = ClaudeCodeProvider(["no-such-claude"], {"PATH": str(tmp_path)}).info()
    assert not missing.available and missing.unavailable_reason == "no-such-claude not found"
