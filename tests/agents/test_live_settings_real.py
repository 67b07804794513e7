"""UpdateAgent of a live agent's model and mode through the wire, with the real agents against
the fake model server (docs/design.md#live-config): Claude Code's `set_model` and
`set_permission_mode` control requests change its running process (the next model call names
the new model; acceptEdits writes without asking), and Codex takes the new model with its
next `turn/start`; both keep the same session."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
from tests.support.daemon import serving_stubs
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
    try:
        async with serving_stubs(Config(extra_providers=providers)) as stubs:
            yield stubs
    finally:
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


async def changed_live(
    stubs: Stubs, fake: FakeModelServer, cwd: str, provider: str, models: tuple[str, str], mode: str
) -> tuple[svc_pb.UpdateAgentResponse, list[str]]:
    """An agent of `provider` on the first model runs a turn, gets the second model and
    `mode` by UpdateAgent; its next turn (a file write) makes model calls naming the second,
    in the same provider session. The update's answer and that turn's event kinds."""
    request = create_request(cwd, provider=provider, model=models[0])
    agent = (await stubs.agents.CreateAgent(request, timeout=60)).agent
    await turn(stubs, agent.id, "Say hi [[reply: hi]]")
    reply = await update(stubs, agent.id, models[1], mode)
    calls_before = len(fake.model_calls())
    kinds = await turn(stubs, agent.id, f"[[write: {cwd}/live.txt]] [[reply: written]]")
    later = fake.model_calls()[calls_before:]
    assert later and all(c.body["model"] == models[1] for c in later), [
        c.body["model"] for c in fake.model_calls()
    ]
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent.id))
    assert got.agent.provider_session_id == agent.provider_session_id
    return reply, kinds


async def test_claude_code_changes_model_and_mode_in_its_running_process(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    models = (programs.CLAUDE_MODEL, OTHER_CLAUDE_MODEL)
    cwd = str(place.cwd)
    reply, kinds = await changed_live(stubs, fake, cwd, "claude-code", models, "acceptEdits")
    assert (reply.agent.model, reply.agent.mode) == (OTHER_CLAUDE_MODEL, "acceptEdits")
    # In the default mode Claude Code would ask before the write (and the turn would wait).
    assert "permission_requested" not in kinds
    assert (place.cwd / "live.txt").read_text() == "written by the fake model\n"


async def test_codex_takes_the_new_model_and_mode_with_its_next_turn(
    stubs: Stubs, place: Place, fake: FakeModelServer
) -> None:
    models = (programs.CODEX_MODEL, OTHER_CODEX_MODEL)
    reply, kinds = await changed_live(stubs, fake, str(place.cwd), "codex", models, "full-access")
    assert (reply.agent.model, reply.agent.mode) == (OTHER_CODEX_MODEL, "full-access")
    # In its first mode (untrusted) codex would ask before the write: full-access never asks.
    assert "permission_requested" not in kinds
    assert (place.cwd / "live.txt").exists()
