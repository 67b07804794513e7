"""The cluster benchmarks' processes (bench/cluster.py): three NATS servers, three corral
nodes (bench/cluster_node.py) each in its own process, Envoy in front; and the few calls the
figures make on a node."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import content_pb2 as content_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs
from tests.support.cluster_nodes import envoy_on_loopback
from tests.support.envoy import Envoy, envoy_running
from tests.support.nats import free_ports, running_nats_cluster


@dataclass
class Node:
    name: str
    proc: asyncio.subprocess.Process
    address: str
    channel: grpc.aio.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.address)

    @property
    def stubs(self) -> Stubs:
        return Stubs.of(self.channel)


async def start_node(tmp: Path, name: str, port: int, urls: list[str]) -> Node:
    with (tmp / f"{name}.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bench.cluster_node", str(port), str(tmp / name)),
            *(name, ",".join(urls)),
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == str(port).encode(), f"node {name} did not start: {line!r}"
    return Node(name, proc, f"127.0.0.1:{port}")


@contextlib.asynccontextmanager
async def bench_cluster(tmp: Path) -> AsyncIterator[tuple[list[Node], Envoy]]:
    with running_nats_cluster(made(tmp / "nats")) as nats:
        ports = free_ports(3)
        names = ("n1", "n2", "n3")
        nodes = list(
            await asyncio.gather(
                *(start_node(tmp, n, p, nats.urls) for n, p in zip(names, ports, strict=True))
            )
        )
        try:
            with envoy_running(made(tmp / "envoy"), envoy_on_loopback(ports, ports)) as envoy:
                for port in ports:
                    await envoy.until_health(port, "healthy")
                yield nodes, envoy
        finally:
            for node in nodes:
                if node.proc.returncode is None:
                    node.proc.terminate()
            for node in nodes:
                await stopped(node)


async def stopped(node: Node) -> None:
    """The node's exit after its SIGTERM; killed, and said so, if it hangs in its stop."""
    try:
        await asyncio.wait_for(node.proc.wait(), 30)
    except TimeoutError:
        print(f"node {node.name} did not stop within 30 s of SIGTERM: killed", flush=True)
        node.proc.kill()
        await node.proc.wait()
    await node.channel.close()


def made(path: Path) -> Path:
    path.mkdir()
    return path


def prompt_of(agent_id: str, text: str) -> turn_pb.SendPromptRequest:
    return turn_pb.SendPromptRequest(agent_id=agent_id, content=[content_pb.ContentPart(text=text)])


async def create(node: Node, provider: str, cwd: str) -> str:
    request = agent_pb.CreateAgentRequest(provider=provider, cwd=cwd)
    return (await node.stubs.agents.CreateAgent(request)).agent.id


async def idle(node: Node, agent_id: str) -> None:
    error = await ended(node, agent_id)
    assert not error, f"agent {agent_id} on {node.name}: {error}"


async def ended(node: Node, agent_id: str) -> str:
    """Once the agent's turns ended: "" when it is idle, else its error."""
    request = turn_pb.WaitForIdleRequest(agent_id=agent_id)
    request.timeout.FromSeconds(600)
    reply = await node.stubs.turns.WaitForIdle(request)
    if reply.status == turn_pb.WAIT_STATUS_IDLE:
        return ""
    got = await node.stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
    return f"{got.agent.last_error.code}: {got.agent.last_error.message}"
