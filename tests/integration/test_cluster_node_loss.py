"""A corral node killed with SIGKILL (docs/cluster.md#node-loss): its leases expire within the
bound (a 2 s lease here, plus the 1 s skew margin and a sweep), another node takes its agents
over and every other node shows them `errored` with NODE_LOST, their timelines and records
intact; `ReloadAgent {node}` restarts one on a node of the caller's choice, and a prompt then
runs there, its events following the earlier ones with no gap on every subscriber."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as agent_pb
from tests.integration.test_cluster_e2e import (
    Subscriber,
    create_on,
    idle,
    no_gap,
    prompt,
    prompts_stored,
    replay,
    settled_head,
    stubs_at,
    until,
)
from tests.support.client import error_details
from tests.support.cluster_nodes import Cluster, running_cluster

LEASE_S = 2.0
# The lease and the skew margin, a directory entry's expiry (the same duration), the sweep's
# period (a third of a lease), and slack for a loaded 2-core machine.
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


async def test_a_killed_nodes_agents_show_node_lost_everywhere_and_reload_elsewhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    victim, second, third = cluster.nodes
    subscribers = [Subscriber(n.name, n.address).start() for n in (second, third)]
    agent_id = await create_on(victim.address, tmp_path, "on the victim")
    await prompt(victim.address, agent_id, "before the kill")
    await idle(victim.address, agent_id)
    before = await prompts_stored(second.address, agent_id)

    await asyncio.to_thread(victim.kill)
    killed = time.monotonic()

    async def lost_everywhere() -> bool:
        agents = [await agent_at(node.address, agent_id) for node in (second, third)]
        return all(lost(agent) for agent in agents)

    await until(lost_everywhere, "NODE_LOST on both other nodes")
    took = time.monotonic() - killed
    assert took < BOUND_S, f"NODE_LOST after {took:.1f} s (bound {BOUND_S:g} s)"
    print(f"NODE_LOST {took:.1f} s after the kill", end=" ")
    for node in (second, third):
        listed = await listed_at(node.address, agent_id)
        assert lost(listed), listed
        assert "c1" in listed.last_error.message, listed.last_error
        assert await prompts_stored(node.address, agent_id) == before  # the timeline intact

    async with stubs_at(second.address) as stubs:
        request = agent_pb.ReloadAgentRequest(agent_id=agent_id, node=third.name)
        reloaded = (await stubs.agents.ReloadAgent(request)).agent
    assert reloaded.lifecycle.HasField("idle"), reloaded
    await prompt(second.address, agent_id, "after the reload")  # forwarded to its new owner
    await idle(third.address, agent_id)
    assert (await prompts_stored(third.address, agent_id))[-1] == "/reply after the reload"

    head = await settled_head(cluster)
    for subscriber in subscribers:
        await subscriber.reached(head)
        no_gap(subscriber)
        await subscriber.stop()
    assert subscribers[0].up_to(head) == subscribers[1].up_to(head)
    assert await replay(second.address, head) == subscribers[0].up_to(head)


async def test_reload_agent_names_a_node_the_cluster_knows(
    cluster: Cluster, tmp_path: Path
) -> None:
    agent_id = await create_on(cluster.nodes[0].address, tmp_path, "stays")
    async with stubs_at(cluster.nodes[1].address) as stubs:
        request = agent_pb.ReloadAgentRequest(agent_id=agent_id, node="nowhere")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stubs.agents.ReloadAgent(request)
    details = error_details(refused.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.reason == "UNKNOWN_NODE" and details.fields == ("node",), details
    assert (await agent_at(cluster.nodes[1].address, agent_id)).lifecycle.HasField("idle")
