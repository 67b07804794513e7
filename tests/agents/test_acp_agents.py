"""ACP agents (gemini-cli `--acp` against the fake Gemini API, claude-agent-acp against the fake
Anthropic API) run whole turns offline: text, thinking, a command behind a permission request
(allowed, then rejected), a model HTTP error, and cancel mid-stream; each session goes on after
an error or a cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agents import programs
from tests.agents.child import ChildError
from tests.agents.conftest import Place, Spawn, Timings
from tests.agents.drivers import AcpDriver, allow_once, reject_once
from tests.support.fake_models import FakeModelServer

ProgramFactory = Callable[[Path, Path, str], programs.Program]

AGENTS = pytest.mark.parametrize(
    "make",
    [
        pytest.param(programs.gemini, id="gemini"),
        pytest.param(programs.claude_acp, id="claude-acp"),
    ],
)


@AGENTS
async def test_acp_agent_streams_a_text_turn_and_a_thinking_turn_in_one_session(
    make: ProgramFactory, fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(make(place.home, place.cwd, fake.url)) as child:
        acp = AcpDriver(child, place.cwd)
        timings.start()
        session_id = await acp.start_session()
        timings.stop("start")
        timings.start()
        result = await acp.prompt(session_id, "Say hi [[reply: hi over acp]]")
        timings.stop("text turn")
        assert result["stopReason"] == "end_turn"
        assert acp.text() == "hi over acp"

        acp.updates.clear()
        timings.start()
        result = await acp.prompt(session_id, "Ponder [[think: a deep thought]] [[reply: 42]]")
        timings.stop("thinking turn")
        assert result["stopReason"] == "end_turn"
        assert "a deep thought" in acp.text("agent_thought_chunk")
        assert acp.text() == "42"

    assert [c.answer for c in fake.model_calls()] == ["text", "text"]


@AGENTS
async def test_acp_agent_runs_an_allowed_command_and_not_a_rejected_one(
    make: ProgramFactory, fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(make(place.home, place.cwd, fake.url)) as child:
        acp = AcpDriver(child, place.cwd, allow_once)
        session_id = await acp.start_session()
        timings.start()
        prompt = "[[shell: touch made-over-acp && echo ran]] [[reply: the command ran]]"
        result = await acp.prompt(session_id, prompt)
        timings.stop("tool turn, allowed")
        assert result["stopReason"] == "end_turn" and acp.text() == "the command ran"
        assert (place.cwd / "made-over-acp").exists()
        [ask] = acp.agent_requests
        assert ask["method"] == "session/request_permission"
        call_id = ask["params"]["toolCall"]["toolCallId"]
        statuses = [u.get("status") for u in acp.updates if u.get("toolCallId") == call_id]
        assert [s for s in statuses if s][-1] == "completed"
        assert "ran" in fake.model_calls()[1].tool_results[0]

        acp.permission = reject_once
        acp.updates.clear()
        timings.start()
        result = await acp.prompt(session_id, "[[shell: touch nope]] [[reply: fine]]")
        timings.stop("tool turn, rejected")
        assert not (place.cwd / "nope").exists()
        assert len(acp.agent_requests) == 2
        # gemini-cli ends the turn when a tool is rejected; claude-agent-acp tells the model.
        assert result["stopReason"] == "end_turn"


async def next_prompt_after_an_abnormal_end(
    make: ProgramFactory, acp: AcpDriver, session_id: str
) -> None:
    """A prompt after an error or a cancel runs normally; for claude-agent-acp 0.23.1 only the
    second one does: the first ends at once with end_turn, zero usage and no model call (the
    previous query's leftover result), and the second then runs both prompts' model calls."""
    acp.updates.clear()
    if make is programs.claude_acp:
        stale = await acp.prompt(session_id, "One [[reply: one]]")
        assert stale["stopReason"] == "end_turn" and stale["usage"]["totalTokens"] == 0
        assert acp.text() == ""
    result = await acp.prompt(session_id, "Again [[reply: back]]")
    assert result["stopReason"] == "end_turn" and acp.text().endswith("back")


@AGENTS
async def test_acp_agent_fails_a_prompt_on_a_model_http_error_and_goes_on(
    make: ProgramFactory, fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(make(place.home, place.cwd, fake.url)) as child:
        acp = AcpDriver(child, place.cwd)
        session_id = await acp.start_session()
        timings.start()
        with pytest.raises(ChildError, match="upstream exploded"):
            await acp.prompt(session_id, "Fail [[error: 500 upstream exploded]]")
        timings.stop("error turn")
        await next_prompt_after_an_abnormal_end(make, acp, session_id)

    statuses = [c.status for c in fake.model_calls()]
    assert statuses[:2] == [500, 200]  # one attempt at the failing call: no retry


@AGENTS
async def test_acp_agent_cancel_cuts_a_slow_stream_and_ends_the_prompt_as_cancelled(
    make: ProgramFactory, fake: FakeModelServer, place: Place, spawn: Spawn, timings: Timings
) -> None:
    async with spawn(make(place.home, place.cwd, fake.url)) as child:
        acp = AcpDriver(child, place.cwd)
        session_id = await acp.start_session()
        prompt = asyncio.create_task(acp.prompt(session_id, "Count slowly [[slow]]"))
        await acp.wait_update("agent_message_chunk")
        timings.start()
        await acp.notify("session/cancel", {"sessionId": session_id})
        result = await prompt
        timings.stop("cancel -> prompt result")
        assert result["stopReason"] == "cancelled"
        await next_prompt_after_an_abnormal_end(make, acp, session_id)

    cut = fake.model_calls()[0]
    await asyncio.to_thread(fake.wait_for, lambda _: cut.ended_s > 0)
    assert not cut.finished
