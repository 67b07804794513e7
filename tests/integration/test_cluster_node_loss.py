"""A corral node killed with SIGKILL (docs/cluster.md#node-loss), one cluster for the whole
story: its leases expire within the bound (a 2 s lease here, plus the 1 s skew margin and a
sweep), another node takes its agents over and every other node shows them `errored` with
NODE_LOST, their timelines and queued prompts intact; `ReloadAgent {node}` restarts one on the
node named (and again on another, handed over by its new owner), refuses a node the cluster
does not know and a node where the agent's cwd does not exist, and prompts then run there,
their events following the earlier ones with no gap on every subscriber."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.integration.test_cluster_e2e import (
    Subscriber,
    idle,
    no_gap,
    prompt,
    prompts_stored,
    replay,
    settled_head,
    stubs_at,
    until,
)
from tests.support.client import ErrorDetails, create_request, error_details, prompt_request
from tests.support.cluster_nodes import Cluster, running_cluster

LEASE_S = 2.0
# The lease and the skew margin (a directory entry expires with the same duration), the
# sweep's period (a third of a lease), and slack for a loaded 2-core machine.
BOUND_S = LEASE_S + 1.0 + LEASE_S / 3 + 4.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, extra=("--lease-s", str(LEASE_S))) as running:
        yield running


async def agent_at(address: str, agent_id: str) -> agent_pb2.Agent:
    async with stubs_at(address) as stubs:
        return (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))).agent


async def listed_at(address: str, agent_id: str) -> agent_pb2.Agent:
    async with stubs_at(address) as stubs:
        reply = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
    (agent,) = [agent for agent in reply.agents if agent.id == agent_id]
    return agent


def lost(agent: agent_pb2.Agent) -> bool:
    lifecycle = agent.lifecycle
    return lifecycle.HasField("errored") and lifecycle.errored.error.code == "NODE_LOST"


async def create(address: str, cwd: Path) -> str:
    await asyncio.to_thread(cwd.mkdir)
    async with stubs_at(address) as stubs:
        return (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id


async def reload_at(address: str, agent_id: str, node: str) -> agent_pb2.Agent:
    async with stubs_at(address) as stubs:
        request = agent_pb.ReloadAgentRequest(agent_id=agent_id, node=node)
        return (await stubs.agents.ReloadAgent(request, timeout=60)).agent


async def refused_reload(address: str, agent_id: str, node: str) -> ErrorDetails:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await reload_at(address, agent_id, node)
    return error_details(refused.value)


async def test_a_killed_nodes_agents_show_node_lost_everywhere_and_reload_elsewhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    victim, second, third = cluster.nodes
    subscribers = [Subscriber(n.name, n.address).start() for n in (second, third)]
    main = await create(victim.address, tmp_path / "main")
    busy = await create(victim.address, tmp_path / "busy")
    gone = await create(victim.address, tmp_path / "gone")
    await prompt(victim.address, main, "before the kill")
    await idle(victim.address, main)
    async with stubs_at(victim.address) as stubs:  # a turn running, a prompt queued behind it
        await stubs.turns.SendPrompt(prompt_request(busy, "/sleep 600000"))
        queued = prompt_request(
            busy, "/reply queued", client_message_id="queued-1", if_running=turn_pb.IF_RUNNING_QUEUE
        )
        await stubs.turns.SendPrompt(queued)
    unknown = await refused_reload(second.address, main, "nowhere")  # checked by the owner
    assert unknown.code == grpc.StatusCode.INVALID_ARGUMENT, unknown
    assert unknown.reason == "UNKNOWN_NODE" and unknown.fields == ("node",), unknown
    before = await prompts_stored(second.address, main)

    await asyncio.to_thread(victim.kill)
    killed = time.monotonic()

    async def lost_everywhere() -> bool:
        ids = (main, busy, gone)
        agents = [await agent_at(n.address, a) for n in (second, third) for a in ids]
        return all(lost(agent) for agent in agents)

    await until(lost_everywhere, "NODE_LOST on both other nodes")
    took = time.monotonic() - killed
    assert took < BOUND_S, f"NODE_LOST after {took:.1f} s (bound {BOUND_S:g} s)"
    print(f"NODE_LOST {took:.1f} s after the kill", end=" ")
    for node in (second, third):
        listed = await listed_at(node.address, main)
        assert lost(listed) and "node c1 was lost" in listed.last_error.message, listed
        assert await prompts_stored(node.address, main) == before  # the timeline intact
        (waiting,) = (await agent_at(node.address, busy)).queued_prompts
        assert waiting.client_message_id == "queued-1", waiting

    await asyncio.to_thread(shutil.rmtree, tmp_path / "gone")
    missing = await refused_reload(second.address, gone, third.name)
    assert missing.code == grpc.StatusCode.FAILED_PRECONDITION, missing
    assert missing.reason == "CWD_MISSING" and "node c3" in missing.message, missing
    assert lost(await agent_at(second.address, gone))

    # Restarted on c3 (its new owner or not), then on c2: handed over by c3 for sure.
    for at, node in ((second, third), (third, second)):
        reloaded = await reload_at(at.address, main, node.name)
        assert reloaded.lifecycle.HasField("idle"), reloaded
        await prompt(at.address, main, f"on {node.name}")  # forwarded to its new owner
        await idle(node.address, main)
    assert (await prompts_stored(third.address, main))[-2:] == ["/reply on c3", "/reply on c2"]

    head = await settled_head(cluster)
    for subscriber in subscribers:
        await subscriber.reached(head)
        no_gap(subscriber)
        await subscriber.stop()
    assert subscribers[0].up_to(head) == subscribers[1].up_to(head)
    assert await replay(second.address, head) == subscribers[0].up_to(head)
