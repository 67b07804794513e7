"""Claude Code names a new session when corral asks it (its `generate_session_title` control
request, docs/design.md#titles), through corral's wire against the real `claude` and the fake
Anthropic API: the fallback title from the prompt first, Claude's title after it, a person's
title kept; a failed title request leaves the turn alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.claude_code import ClaudeCodeProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.conftest import Place
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer
from tests.support.watch import Watch

# The fake model answers every call of the turn with the reply marker's text, the title call
# too: Claude Code asks for the title as JSON ({"title": ...}), which the turn's reply then is.
PROMPT = 'Fix the login form [[reply: {"title": "Login form fix"}]]'


@pytest.fixture
async def stubs(fake: FakeModelServer, place: Place) -> AsyncIterator[Stubs]:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    assert programs.installed("claude"), "claude is not installed: run buildscripts/test"
    provider = ClaudeCodeProvider(program.argv[:1], program.env, ask_title=True)
    daemon = DaemonThread(Config(extra_providers={"claude-code": provider})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()
        sweep(programs.LEFTOVER_TAG, program.tag)


async def agent_with(stubs: Stubs, place: Place, title: str = "") -> str:
    request = create_request(
        str(place.cwd), provider="claude-code", model=programs.CLAUDE_MODEL, title=title
    )
    agent_id: str = (await stubs.agents.CreateAgent(request)).agent.id
    return agent_id


async def finished_turn(stubs: Stubs, agent_id: str, prompt: str) -> str:
    """The terminal event's kind of one turn."""
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    events = [e async for e in stubs.turns.StreamTurn(request)]
    return str(events[-1].WhichOneof("event"))


async def agent_of(stubs: Stubs, agent_id: str) -> agent_pb.Agent:
    agent: agent_pb.Agent = (
        await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    ).agent
    return agent


async def title_asked(fake: FakeModelServer) -> None:
    """Until the fake model has answered Claude Code's title call (the one that asks for
    structured output)."""
    deadline = asyncio.get_running_loop().time() + 30
    while not any("output_config" in c.body for c in fake.model_calls()):
        assert asyncio.get_running_loop().time() < deadline, "Claude Code asked no title"
        await asyncio.sleep(0.05)


async def until_titled(watch: Watch, source: int) -> agent_pb.Agent:
    """The first agent update whose title has `source` (Claude answers beside the turn)."""

    def titled(event: Any) -> bool:
        agent = event.agent_upserted.agent
        return bool(event.HasField("agent_upserted") and agent.title_source == source)

    async with asyncio.timeout(30):
        event = await watch.until(titled)
    agent: agent_pb.Agent = event.agent_upserted.agent
    return agent


async def test_claude_codes_title_replaces_the_fallback(stubs: Stubs, place: Place) -> None:
    agent_id = await agent_with(stubs, place)
    watch = await Watch(stubs, agent_id).synced()
    assert await finished_turn(stubs, agent_id, PROMPT) == "turn_completed"
    fallback = await until_titled(watch, agent_pb.TITLE_SOURCE_PROMPT)
    assert fallback.title == 'Fix the login form [[reply: {"title": "Login form fix"}]]'
    titled = await until_titled(watch, agent_pb.TITLE_SOURCE_PROVIDER)
    assert titled.title == "Login form fix"
    assert (await agent_of(stubs, agent_id)).title == "Login form fix"
    watch.cancel()


async def test_claude_code_never_replaces_a_persons_title(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    agent_id = await agent_with(stubs, place, title="mine")
    assert await finished_turn(stubs, agent_id, PROMPT) == "turn_completed"
    await title_asked(fake)
    # Claude answers corral right after the model did: long before the next turn ends.
    assert await finished_turn(stubs, agent_id, "again [[reply: ok]]") == "turn_completed"
    agent = await agent_of(stubs, agent_id)
    assert (agent.title, agent.title_source) == ("mine", agent_pb.TITLE_SOURCE_USER)


async def test_a_title_claude_cannot_give_leaves_the_fallback_and_the_turn(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    # A plain-text reply is no JSON title: Claude answers the request with no title.
    agent_id = await agent_with(stubs, place)
    assert await finished_turn(stubs, agent_id, "Say hi [[reply: hi]]") == "turn_completed"
    await title_asked(fake)
    assert await finished_turn(stubs, agent_id, "again [[reply: ok]]") == "turn_completed"
    agent = await agent_of(stubs, agent_id)
    assert (agent.title, agent.title_source) == (
        "Say hi [[reply: hi]]",
        agent_pb.TITLE_SOURCE_PROMPT,
    )
