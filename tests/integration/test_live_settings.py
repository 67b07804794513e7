"""UpdateAgent of a live agent's model or mode through the wire (docs/design.md#live-config):
the change goes to the running session (the scripted `/settings` step replies what the
session runs with), a provider that cannot change it live answers FAILED_PRECONDITION with
its reason and nothing changes, and an agent whose session is not open records it for the
next one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli.main import main
from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.providers.scripted_provider import ScriptedProvider
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonThread


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    clock = FakeClock()
    fixed = ScriptedProvider(clock, name="fixed", live_settings=False)
    daemon = DaemonThread(Config(extra_providers={"fixed": fixed}), clock).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


async def reply_to(stubs: Stubs, agent_id: str, script: str) -> str:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(script))
    events = [e async for e in stubs.turns.StreamTurn(request)]
    assert events[-1].WhichOneof("event") == "turn_completed"
    rows = [e.row.item for e in events if e.HasField("row")]
    return "".join(r.assistant_message.text for r in rows if r.HasField("assistant_message"))


async def update(stubs: Stubs, agent_id: str, **fields: str) -> svc_pb.UpdateAgentResponse:
    mask = field_mask_pb2.FieldMask(paths=list(fields))
    request = svc_pb.UpdateAgentRequest(agent_id=agent_id, update_mask=mask)
    for name, value in fields.items():
        setattr(request, name, value)
    reply: svc_pb.UpdateAgentResponse = await stubs.agents.UpdateAgent(request)
    return reply


async def test_a_mode_change_reaches_the_running_session(stubs: Stubs, tmp_path: Path) -> None:
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    assert await reply_to(stubs, agent_id, "/settings") == "model= mode="
    reply = await update(stubs, agent_id, mode="plan")
    assert reply.agent.mode == "plan"
    # The same session (no restart), now in plan mode.
    assert await reply_to(stubs, agent_id, "/settings") == "model= mode=plan"
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    assert got.agent.mode == "plan"


async def test_a_provider_that_cannot_change_it_live_says_so_and_nothing_changes(
    stubs: Stubs, tmp_path: Path
) -> None:
    created = await stubs.agents.CreateAgent(create_request(str(tmp_path), provider="fixed"))
    agent_id = created.agent.id
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await update(stubs, agent_id, mode="plan")
    details = error_details(raised.value)
    assert details.code is grpc.StatusCode.FAILED_PRECONDITION
    assert details.reason == "SETTINGS_NOT_LIVE"
    assert "cannot change the mode 'plan' of a running session" in details.message
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    assert got.agent.mode == "default" and got.agent.updated_at == created.agent.updated_at
    assert await reply_to(stubs, agent_id, "/settings") == "model= mode="
    # A title is no setting of the session: it changes as ever.
    assert (await update(stubs, agent_id, title="still fine")).agent.title == "still fine"


async def test_an_unknown_mode_is_refused_before_the_provider_is_asked(
    stubs: Stubs, tmp_path: Path
) -> None:
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await update(stubs, agent_id, mode="warp")
    details = error_details(raised.value)
    assert details.code is grpc.StatusCode.INVALID_ARGUMENT and details.fields == ("mode",)


def test_corral_update_changes_a_live_agents_mode_or_says_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    fixed = ScriptedProvider(clock, name="fixed", live_settings=False)
    daemon = DaemonThread(Config(extra_providers={"fixed": fixed}), clock).start()
    try:
        addr = daemon.address
        assert main(["--addr", addr, "run", "--cwd", str(tmp_path), "/reply hi"]) == 0
        assert main(["--addr", addr, "--json", "ls"]) == 0
        agent_id = json.loads(capsys.readouterr().out.splitlines()[-1])["id"]
        assert main(["--addr", addr, "update", agent_id[:8], "--mode", "plan"]) == 0
        assert (
            capsys.readouterr().out == f"{agent_id} mode plan, model scripted-1, title /reply hi\n"
        )
        run = ["--addr", addr, "run", "--provider", "fixed", "--cwd", str(tmp_path), "/reply x"]
        assert main(run) == 0
        capsys.readouterr()
        assert main(["--addr", addr, "--json", "ls"]) == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        fixed_id = next(a["id"] for a in listed if a.get("provider") == "fixed")
        assert main(["--addr", addr, "update", fixed_id, "--mode", "plan"]) != 0
        assert "cannot change the mode 'plan' of a running session" in capsys.readouterr().err
        assert main(["--addr", addr, "update", fixed_id]) == 2
    finally:
        daemon.stop()
