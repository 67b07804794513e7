"""UpdateAgent of a live agent's model and mode through the wire, with the real agents against
the fake model server (docs/design.md#live-config): Claude Code's `set_model` and
`set_permission_mode` control requests change its running process (the next model call names
the new model; acceptEdits writes without asking), and Codex takes the new model with its
next `turn/start`; both keep the same session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.clock import SystemClock
from corral_server.providers.base import Provider
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.conftest import Place
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer

OTHER_CLAUDE_MODEL = "claude-haiku-4-5"
OTHER_CODEX_MODEL = "gpt-5.4"


@pytest.fixture
async def stubs(fake: FakeModelServer, place: Place) -> AsyncIterator[Stubs]:
    claude = programs.claude_code(place.home, place.cwd, fake.url)
    codex = programs.codex(place.home, place.cwd, fake.url)
    assert programs.installed("claude") and programs.installed("codex")
    providers: dict[str, Provider] = {
        "claude-code": ClaudeCodeProvider(claude.argv[:1], claude.env),
        "codex": CodexProvider(codex.argv[:1], codex.env, clock=SystemClock()),
    }
    daemon = DaemonThread(Config(extra_providers=providers)).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()
        sweep(programs.LEFTOVER_TAG, claude.tag)
        sweep(programs.LEFTOVER_TAG, codex.tag)


async def turn(stubs: Stubs, agent_id: str, prompt: str) -> list[str]:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    kinds = [str(e.WhichOneof("event")) async for e in stubs.turns.StreamTurn(request)]
    assert kinds[-1] == "turn_completed", kinds
    return kinds


async def update(stubs: Stubs, agent_id: str, model: str, mode: str) -> svc_pb.UpdateAgentResponse:
    mask = field_mask_pb2.FieldMask(paths=["model", "mode"])
    request = svc_pb.UpdateAgentRequest(agent_id=agent_id, update_mask=mask, model=model, mode=mode)
    reply: svc_pb.UpdateAgentResponse = await stubs.agents.UpdateAgent(request, timeout=60)
    return reply


async def test_claude_code_changes_model_and_mode_in_its_running_process(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    request = create_request(str(place.cwd), provider="claude-code", model=programs.CLAUDE_MODEL)
    agent = (await stubs.agents.CreateAgent(request, timeout=60)).agent
    await turn(stubs, agent.id, "Say hi [[reply: hi]]")
    session_id = agent.provider_session_id
    reply = await update(stubs, agent.id, OTHER_CLAUDE_MODEL, "acceptEdits")
    assert (reply.agent.model, reply.agent.mode) == (OTHER_CLAUDE_MODEL, "acceptEdits")
    calls_before = len(fake.model_calls())
    target = place.cwd / "live.txt"
    kinds = await turn(stubs, agent.id, f"[[write: {target}]] [[reply: written]]")
    assert "permission_requested" not in kinds  # acceptEdits, in the same process
    assert target.read_text() == "written by the fake model\n"
    later = fake.model_calls()[calls_before:]
    assert later and all(c.body["model"] == OTHER_CLAUDE_MODEL for c in later), [
        c.body["model"] for c in fake.model_calls()
    ]
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent.id))
    assert got.agent.provider_session_id == session_id


async def test_codex_takes_the_new_model_with_its_next_turn(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    request = create_request(str(place.cwd), provider="codex", model=programs.CODEX_MODEL)
    agent = (await stubs.agents.CreateAgent(request, timeout=60)).agent
    await turn(stubs, agent.id, "Say hi [[reply: hi]]")
    reply = await update(stubs, agent.id, OTHER_CODEX_MODEL, "read-only")
    assert (reply.agent.model, reply.agent.mode) == (OTHER_CODEX_MODEL, "read-only")
    calls_before = len(fake.model_calls())
    await turn(stubs, agent.id, "Again [[reply: again]]")
    later = fake.model_calls()[calls_before:]
    assert later and all(c.body["model"] == OTHER_CODEX_MODEL for c in later)
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent.id))
    assert got.agent.provider_session_id == agent.provider_session_id
