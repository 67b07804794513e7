"""ImportAgent through corral's wire, against the real programs: a daemon runs a turn with the
real agent and stops; a second daemon, on a fresh state directory, imports that provider
session. The imported agent holds the conversation as rows under its own fresh epoch, is idle
with the provider session id, and its next turn continues that conversation (the fake model
server sees the earlier messages). A session the provider does not know is refused, creating
nothing.

Per agent: Claude Code (its transcript file), Codex (`thread/resume`), claude-agent-acp (what
ACP `session/load` replays)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import Provider
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
from tests.agents.test_resume_after_restart import anthropic_texts
from tests.support.client import Stubs, error_details
from tests.support.fake_models import FakeModelServer

UNKNOWN_SESSION = "01a22d53-0000-7000-8000-000000000000"  # well-formed, never made
FIRST = [("user_message", "First [[reply: one]]"), ("assistant_message", "one")]
SECOND = [("user_message", "Second [[reply: two]]"), ("assistant_message", "two")]


@pytest.fixture
async def leftovers() -> AsyncIterator[list[programs.Program]]:
    ran: list[programs.Program] = []
    try:
        yield ran
        for program in ran:
            await no_process_left(program.tag)
    finally:
        for program in ran:
            sweep(programs.LEFTOVER_TAG, program.tag)


def openai_texts(call: Any) -> list[str]:
    return [
        part["text"]
        for item in call.body["input"]
        if item.get("type") == "message"
        for part in item["content"]
    ]


def same_conversation(rows: list[tuple[str, str]], expected: list[tuple[str, str]]) -> bool:
    """`rows` are `expected`, except that a user message may carry text before the prompt:
    claude-agent-acp replays its own `/model` command (which it sends before the first prompt)
    as user text chunks, and ACP chunks in a row are one message."""
    if len(rows) != len(expected):
        return False
    return all(
        kind == want_kind and (text == want or (kind == "user_message" and text.endswith(want)))
        for (kind, text), (want_kind, want) in zip(rows, expected, strict=True)
    )


async def import_agent(stubs: Stubs, provider: str, session_id: str, cwd: Path) -> Any:
    request = agent_svc_pb.ImportAgentRequest(
        provider=provider, provider_session_id=session_id, cwd=str(cwd)
    )
    return (await stubs.agents.ImportAgent(request)).agent


async def first_session(state: Path, name: str, provider: Provider, cwd: Path, **kw: Any) -> str:
    """Run one turn with the real agent in a daemon of its own; the provider session id."""
    async with daemon_on(state, name, provider) as stubs:
        agent_id = await create_agent(stubs, cwd, name, **kw)
        assert ending(await turn(stubs, agent_id, "First [[reply: one]]")) == "turn_completed"
        session_id: str = (await get_agent(stubs, agent_id)).provider_session_id
    assert session_id
    return session_id


async def imported_and_continued(
    stubs: Stubs, name: str, session_id: str, cwd: Path
) -> tuple[Any, list[tuple[str, str]]]:
    """Import the session, check the agent and its rows, run a second turn; the agent and
    the whole timeline after it."""
    agent = await import_agent(stubs, name, session_id, cwd)
    assert agent.lifecycle.WhichOneof("state") == "idle"
    assert (agent.provider, agent.provider_session_id, agent.cwd) == (name, session_id, str(cwd))
    assert agent.timeline.epoch and agent.timeline.next_seq == len(FIRST) + 1
    assert same_conversation(await timeline(stubs, agent.id), FIRST)
    assert ending(await turn(stubs, agent.id, "Second [[reply: two]]")) == "turn_completed"
    return await get_agent(stubs, agent.id), await timeline(stubs, agent.id)


async def test_a_claude_code_session_is_imported_and_its_next_turn_continues_it(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    model = programs.CLAUDE_MODEL
    session_id = await first_session(
        tmp_path / "a", "claude-code", provider, place.cwd, model=model
    )
    async with daemon_on(tmp_path / "b", "claude-code", provider) as stubs:
        agent, rows = await imported_and_continued(stubs, "claude-code", session_id, place.cwd)
    assert agent.provider_session_id == session_id and not agent.last_error.code
    assert rows == FIRST + SECOND
    said = anthropic_texts(fake.model_calls()[-1])
    assert "one" in said and any("First [[reply: one]]" in t for t in said)


async def test_a_codex_thread_is_imported_and_its_next_turn_continues_it(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.codex(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = CodexProvider(program.argv[:1], program.env)
    thread_id = await first_session(tmp_path / "a", "codex", provider, place.cwd)
    async with daemon_on(tmp_path / "b", "codex", provider) as stubs:
        agent, rows = await imported_and_continued(stubs, "codex", thread_id, place.cwd)
    assert agent.provider_session_id == thread_id and not agent.last_error.code
    assert rows == FIRST + SECOND
    texts = openai_texts(fake.model_calls()[-1])
    assert "First [[reply: one]]" in texts and "one" in texts


async def test_a_claude_acp_session_is_imported_from_its_load_replay(
    fake: FakeModelServer, place: Place, tmp_path: Path, leftovers: list[programs.Program]
) -> None:
    program = programs.claude_acp(place.home, place.cwd, fake.url)
    leftovers.append(program)
    provider = AcpProvider(program.argv, program.env, name="acp")
    session_id = await first_session(tmp_path / "a", "acp", provider, place.cwd)
    async with daemon_on(tmp_path / "b", "acp", provider) as stubs:
        agent, rows = await imported_and_continued(stubs, "acp", session_id, place.cwd)
    assert agent.provider_session_id == session_id and not agent.last_error.code
    assert same_conversation(rows, FIRST + SECOND)
    said = anthropic_texts(fake.model_calls()[-1])
    assert "one" in said and any("First [[reply: one]]" in t for t in said)


@pytest.mark.parametrize(
    ("name", "code", "reason"),
    [
        ("claude-code", grpc.StatusCode.NOT_FOUND, "PROVIDER_SESSION_NOT_FOUND"),
        ("codex", grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION"),
    ],
)
async def test_importing_a_session_the_agent_does_not_know_is_refused_creating_nothing(
    name: str,
    code: grpc.StatusCode,
    reason: str,
    fake: FakeModelServer,
    place: Place,
    tmp_path: Path,
    leftovers: list[programs.Program],
) -> None:
    if name == "codex":
        program = programs.codex(place.home, place.cwd, fake.url)
        provider: Provider = CodexProvider(program.argv[:1], program.env)
    else:
        program = programs.claude_code(place.home, place.cwd, fake.url)
        provider = ClaudeCodeProvider(program.argv[:1], program.env)
    leftovers.append(program)
    async with daemon_on(tmp_path / "state", name, provider) as stubs:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await import_agent(stubs, name, UNKNOWN_SESSION, place.cwd)
        listed = await stubs.agents.ListAgents(agent_svc_pb.ListAgentsRequest())
    details = error_details(caught.value)
    assert (details.code, details.reason) == (code, reason), details
    assert UNKNOWN_SESSION in details.message  # with the provider's own reason
    assert list(listed.agents) == []
