"""CreateAgent's placement through the wire: two daemons whose forwarding looks nodes up in the
node directory on three real NATS servers (as a cluster node wires it), so a CreateAgent on
one daemon runs the agent on the node its `corral.node` label names, or on the least loaded
for `*`; a node the directory does not know, or whose entry expired, is refused with its
reason and creates nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import nats.aio.client
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral_server.cluster.nodes import NodeDirectory, Settings
from corral_server.rpc.forward_relay import Forwarding
from tests import conftest
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread
from tests.support.nats import NatsCluster, connect

DURATION_MS, SKEW_MS = 9_000, 1_000


@dataclass
class Node:
    """A daemon, its NATS connection and its copy of the directory (on the daemon's loop)."""

    name: str
    daemon: DaemonThread
    directory: NodeDirectory | None = None
    client: nats.aio.client.Client | None = None

    def place_on(self) -> NodeDirectory:
        assert self.directory is not None
        return self.directory


def start_node(name: str, nats_cluster: NatsCluster, bucket: str, agents: int) -> Node:
    holder: dict[str, NodeDirectory] = {}
    # The look-ups are bound late: the directory opens on the daemon's loop once it serves.
    forwarding = Forwarding(
        name,
        owner_of=lambda agent_id: None,
        address_of=lambda node: holder[name].address_of(node),
        place=lambda labels: holder[name].place(labels),
    )
    daemon = DaemonThread(replace(conftest.test_config(), forwarding=forwarding)).start()
    node = Node(name, daemon)

    async def join() -> None:
        node.client = await connect(nats_cluster)
        node.directory = await NodeDirectory.open(
            node.client.jetstream(),
            name,
            daemon.address,
            daemon.clock,
            Settings(bucket, duration_ms=DURATION_MS, skew_ms=SKEW_MS),
        )
        await node.directory.register(agents)

    daemon.run(join())
    holder[name] = node.place_on()
    return node


def stop_node(node: Node) -> None:
    async def part() -> None:
        if node.directory is not None:
            await node.directory.close()
        if node.client is not None:
            await node.client.close()

    node.daemon.run(part())
    node.daemon.stop()


@pytest.fixture(scope="module")
def nodes(nats_cluster: NatsCluster) -> Iterator[dict[str, Node]]:
    started = {
        name: start_node(name, nats_cluster, "placement_nodes", agents)
        for name, agents in (("a", 0), ("b", 4))
    }
    for node in started.values():
        node.daemon.run(wait_for_every_node(node.place_on(), set(started)))
    yield started
    for node in started.values():
        stop_node(node)


async def wait_for_every_node(directory: NodeDirectory, names: set[str]) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while {entry.node for entry in directory.nodes()} != names:
        assert asyncio.get_running_loop().time() < deadline, "the directory never filled"
        await asyncio.sleep(0.01)


async def created_on(nodes: dict[str, Node], agent_id: str) -> list[str]:
    """The nodes that have the agent."""
    found = []
    for name, node in nodes.items():
        async with grpc.aio.insecure_channel(node.daemon.address) as channel:
            try:
                await Stubs.of(channel).agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.NOT_FOUND
                continue
        found.append(name)
    return found


async def create_on_b(nodes: dict[str, Node], tmp_path: Path, **labels: str) -> str:
    async with grpc.aio.insecure_channel(nodes["b"].daemon.address) as channel:
        request = create_request(str(tmp_path), labels=labels)
        created = await Stubs.of(channel).agents.CreateAgent(request, timeout=20)
    agent_id: str = created.agent.id
    return agent_id


async def test_create_agent_runs_where_its_node_label_says(
    nodes: dict[str, Node], tmp_path: Path
) -> None:
    assert await created_on(nodes, await create_on_b(nodes, tmp_path)) == ["b"]
    named = await create_on_b(nodes, tmp_path, **{"corral.node": "a"})
    assert await created_on(nodes, named) == ["a"]
    # b runs 4 agents by its entry, a none: the least loaded is a.
    anywhere = await create_on_b(nodes, tmp_path, **{"corral.node": "*"})
    assert await created_on(nodes, anywhere) == ["a"]


async def agent_counts(nodes: dict[str, Node]) -> list[int]:
    counts = []
    for node in nodes.values():
        async with grpc.aio.insecure_channel(node.daemon.address) as channel:
            listed = await Stubs.of(channel).agents.ListAgents(agent_pb.ListAgentsRequest())
        counts.append(len(listed.agents))
    return counts


async def test_a_node_unknown_or_not_alive_is_refused_with_its_reason(
    nodes: dict[str, Node], tmp_path: Path
) -> None:
    before = await agent_counts(nodes)
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await create_on_b(nodes, tmp_path, **{"corral.node": "nobody"})
    details = error_details(unknown.value)
    assert (details.code, details.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_NODE")
    assert details.fields == ("labels[corral.node]",)
    # On b's clock, a's entry expires (a's own clock, and its refreshes, stand still).
    nodes["b"].daemon.advance(DURATION_MS + SKEW_MS)
    with pytest.raises(grpc.aio.AioRpcError) as dead:
        await create_on_b(nodes, tmp_path, **{"corral.node": "a"})
    details = error_details(dead.value)
    assert (details.code, details.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NODE_NOT_ALIVE")
    assert await agent_counts(nodes) == before  # nothing created anywhere
