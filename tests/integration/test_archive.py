"""ArchiveAgent through the wire (docs/design.md#lifecycle): the agent and every descendant that
still carries its parent label are archived and closed, kept whole, and hidden from
ListAgents unless asked for; a detached child is not reached."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL
from tests.support.client import Stubs, create_request, error_details, prompt_request
from tests.support.daemon import DaemonThread


async def child_of(stubs: Stubs, cwd: Any, parent: str, team: str) -> str:
    labels = {PARENT_AGENT_ID_LABEL: parent, "team": team}
    return str((await stubs.agents.CreateAgent(create_request(str(cwd), labels=labels))).agent.id)


async def listed(stubs: Stubs, team: str, include_archived: bool = False) -> list[Any]:
    request = svc_pb.ListAgentsRequest(
        label_selector=f"team={team}", include_archived=include_archived
    )
    return list((await stubs.agents.ListAgents(request)).agents)


async def test_archive_cascades_to_descendants_but_not_to_a_detached_child(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    team = "archive-" + tmp_path.name
    root = (
        await stubs.agents.CreateAgent(create_request(str(tmp_path), labels={"team": team}))
    ).agent.id
    child = await child_of(stubs, tmp_path, root, team)
    grandchild = await child_of(stubs, tmp_path, child, team)
    detached = await child_of(stubs, tmp_path, root, team)
    await stubs.agents.DetachAgent(svc_pb.DetachAgentRequest(agent_id=detached))
    # The child runs a turn: archiving cancels it.
    await stubs.turns.SendPrompt(prompt_request(child, "/sleep 60000"))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 60_000)
    reply = await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=root))
    assert list(reply.archived_agent_ids) == [root, child, grandchild]
    assert [a.id for a in await listed(stubs, team)] == [detached]
    everyone = {a.id: a for a in await listed(stubs, team, include_archived=True)}
    for agent_id in (root, child, grandchild):
        agent = everyone[agent_id]
        assert agent.HasField("archived_at") and agent.lifecycle.WhichOneof("state") == "closed"
    assert not everyone[detached].HasField("archived_at")
    assert everyone[detached].lifecycle.WhichOneof("state") == "idle"


async def test_an_agent_closed_before_can_still_be_archived(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    closed = (await stubs.agents.CloseAgent(svc_pb.CloseAgentRequest(agent_id=agent_id))).agent
    reply = await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=agent_id))
    assert list(reply.archived_agent_ids) == [agent_id]
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.HasField("archived_at") and agent.lifecycle == closed.lifecycle
    again = await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id=agent_id))
    assert list(again.archived_agent_ids) == [agent_id]
    after = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert after.archived_at == agent.archived_at  # archived once: the mark does not move


async def test_archiving_an_unknown_agent_is_not_found(aio_channel: grpc.aio.Channel) -> None:
    stubs = Stubs.of(aio_channel)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.agents.ArchiveAgent(svc_pb.ArchiveAgentRequest(agent_id="f" * 32))
    assert error_details(raised.value).reason == "AGENT_NOT_FOUND"
