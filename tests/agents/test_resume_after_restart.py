"""Resume after a daemon restart, through corral's wire, against the real programs: a daemon on
a state directory runs a turn, stops (its agent processes are closed), a new daemon starts on
the same directory, and the next turn of the same agent continues the same provider session:
the model server sees the earlier conversation, and corral's timeline holds each row once.

Per agent: Claude Code (`--resume`), Codex (`thread/resume`), claude-agent-acp (ACP
`session/load`, whose history replay corral drops). gemini-cli's `session/load` fails for a
session created within the same minute (an upstream bug), so it is not tested here; corral
then falls back to a new session as for any refused resume (the Claude Code case below)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.conftest import Place
from tests.agents.resume_support import (
    create_agent,
    daemon_on,
    ending,
    get_agent,
    timeline,
    turn,
)
from tests.agents.test_claude_code_provider import no_process_left
from tests.support.fake_models import FakeModelServer


@pytest.fixture
async def leftovers() -> AsyncIterator[list[programs.Program]]:
    """The programs a test ran: none of their processes may be left after it."""
    ran: list[programs.Program] = []
    try:
        yield ran
        for program in ran:
            await no_process_left(program.tag)
    finally:
        for program in ran:
            sweep(programs.LEFTOVER_TAG, program.tag)


def anthropic_texts(call: Any) -> list[str]:
    """The text of every message of an Anthropic Messages request, in order."""
    texts = []
    for message in call.body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
            continue
        texts += [block.get("text", "") for block in content if block.get("type") == "text"]
    return texts


async def test_a_claude_code_agent_resumes_its_session_after_a_daemon_restart(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    state = tmp_path / "state"
    async with daemon_on(state, "claude-code", provider) as stubs:
        agent_id = await create_agent(stubs, place.cwd, "claude-code", model=programs.CLAUDE_MODEL)
        assert ending(await turn(stubs, agent_id, "First [[reply: one]]")) == "turn_completed"
        session_id = (await get_agent(stubs, agent_id)).provider_session_id
        before = await timeline(stubs, agent_id)
    await no_process_left(program.tag)

    async with daemon_on(state, "claude-code", provider) as stubs:
        assert (await get_agent(stubs, agent_id)).provider_session_id == session_id
        assert ending(await turn(stubs, agent_id, "Second [[reply: two]]")) == "turn_completed"
        agent = await get_agent(stubs, agent_id)
        after = await timeline(stubs, agent_id)
    assert agent.provider_session_id == session_id
    assert after == [
        *before,
        ("user_message", "Second [[reply: two]]"),
        ("assistant_message", "two"),
    ]
    said = anthropic_texts(fake.model_calls()[-1])
    assert "one" in said and any("First [[reply: one]]" in t for t in said)


async def test_a_claude_code_session_that_cannot_be_resumed_is_replaced_with_an_error_row(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    state = tmp_path / "state"
    async with daemon_on(state, "claude-code", provider) as stubs:
        agent_id = await create_agent(stubs, place.cwd, "claude-code", model=programs.CLAUDE_MODEL)
        assert ending(await turn(stubs, agent_id, "First [[reply: one]]")) == "turn_completed"
        session_id = (await get_agent(stubs, agent_id)).provider_session_id
    # Claude Code forgets the conversation: its transcripts are gone.
    shutil.rmtree(Path(program.env["CLAUDE_CONFIG_DIR"]) / "projects")

    async with daemon_on(state, "claude-code", provider) as stubs:
        assert ending(await turn(stubs, agent_id, "Second [[reply: two]]")) == "turn_completed"
        agent = await get_agent(stubs, agent_id)
        rows = await timeline(stubs, agent_id)
    assert agent.provider_session_id not in ("", session_id)  # a new session
    assert agent.last_error.code == "RESUME_FAILED"
    assert session_id in agent.last_error.message
    assert "No conversation found" in agent.last_error.message  # Claude Code's own reason
    assert rows[2:] == [
        ("error", "RESUME_FAILED"),
        ("user_message", "Second [[reply: two]]"),
        ("assistant_message", "two"),
    ]
    assert "one" not in anthropic_texts(fake.model_calls()[-1])  # a fresh conversation


async def test_a_codex_agent_resumes_its_thread_after_a_daemon_restart(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.codex(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = CodexProvider(program.argv[:1], program.env)
    state = tmp_path / "state"
    async with daemon_on(state, "codex", provider) as stubs:
        agent_id = await create_agent(stubs, place.cwd, "codex")
        assert ending(await turn(stubs, agent_id, "First [[reply: one]]")) == "turn_completed"
        thread_id = (await get_agent(stubs, agent_id)).provider_session_id
        before = await timeline(stubs, agent_id)
    await no_process_left(program.tag)

    async with daemon_on(state, "codex", provider) as stubs:
        assert ending(await turn(stubs, agent_id, "Second [[reply: two]]")) == "turn_completed"
        agent = await get_agent(stubs, agent_id)
        after = await timeline(stubs, agent_id)
    assert agent.provider_session_id == thread_id
    assert after == [
        *before,
        ("user_message", "Second [[reply: two]]"),
        ("assistant_message", "two"),
    ]
    texts = [
        part["text"]
        for item in fake.model_calls()[-1].body["input"]
        if item.get("type") == "message"
        for part in item["content"]
    ]
    assert "First [[reply: one]]" in texts and "one" in texts  # the first turn's history


async def test_a_claude_acp_agent_loads_its_session_after_a_daemon_restart_without_replayed_rows(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_acp(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = AcpProvider(program.argv, program.env, name="acp")
    state = tmp_path / "state"
    async with daemon_on(state, "acp", provider) as stubs:
        agent_id = await create_agent(stubs, place.cwd, "acp")
        assert ending(await turn(stubs, agent_id, "First [[reply: one]]")) == "turn_completed"
        session_id = (await get_agent(stubs, agent_id)).provider_session_id
        before = await timeline(stubs, agent_id)
    await no_process_left(program.tag)

    async with daemon_on(state, "acp", provider) as stubs:
        assert ending(await turn(stubs, agent_id, "Second [[reply: two]]")) == "turn_completed"
        agent = await get_agent(stubs, agent_id)
        after = await timeline(stubs, agent_id)
    assert agent.provider_session_id == session_id
    assert not agent.last_error.code
    # session/load replayed "First" and "one" as updates: none of them became a row again.
    assert after == [
        *before,
        ("user_message", "Second [[reply: two]]"),
        ("assistant_message", "two"),
    ]
    said = anthropic_texts(fake.model_calls()[-1])
    assert "one" in said and any("First [[reply: one]]" in t for t in said)
