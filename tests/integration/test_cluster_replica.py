"""Corral nodes on three real NATS servers (docs/cluster.md#read-model): the events of an agent
owned by one node go through the stream, and every node's Subscribe, FetchTimeline and
ListAgents answer the same, built from it; a node restarted resumes from its stored position;
a writer whose lease was taken stores nothing more; another node's agent cannot be changed
here."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.cluster.leases import encode
from corral_server.cluster.log import EventLog
from corral_server.cluster.settings import ClusterConfig
from tests.support.client import Stubs, create_request, error_details, next_message, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.nats import NatsCluster, connect

T = TypeVar("T")
TIMEOUT = 30.0
_clusters = itertools.count()


def settings(nats_cluster: NatsCluster, number: int, node: str) -> ClusterConfig:
    """A cluster of the test's own on the module's NATS servers: its stream and bucket."""
    return ClusterConfig(
        urls=tuple(nats_cluster.urls),
        node_id=node,
        advertise="127.0.0.1:1",
        stream=f"NODES{number}",
        prefix=f"nodes{number}.events.",
        leases_bucket=f"nodes{number}_leases",
    )


class Nodes:
    def __init__(self, tmp_path: Path, nats_cluster: NatsCluster) -> None:
        self.tmp_path = tmp_path
        self.nats = nats_cluster
        self.number = next(_clusters)
        self.running: dict[str, DaemonThread] = {}

    def config(self, node: str) -> Config:
        cluster = settings(self.nats, self.number, node)
        return Config(state_dir=self.tmp_path / node, cluster=cluster)

    def start(self, node: str) -> DaemonThread:
        thread = self.running[node] = DaemonThread(self.config(node)).start()
        return thread

    def stop(self, node: str) -> None:
        self.running.pop(node).stop()


@contextlib.contextmanager
def cluster_of(
    tmp_path: Path, nats_cluster: NatsCluster, names: tuple[str, ...]
) -> Iterator[Nodes]:
    nodes = Nodes(tmp_path, nats_cluster)
    try:
        for name in names:
            nodes.start(name)
        yield nodes
    finally:
        for name in list(nodes.running):
            nodes.stop(name)


@contextlib.asynccontextmanager
async def stubs_of(thread: DaemonThread) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(thread.address) as channel:
        yield Stubs.of(channel)


async def replay(stubs: Stubs, until_revision: int) -> list[bytes]:
    """Every event of a subscription from revision 0 up to `until_revision`, serialized."""
    call = stubs.events.Subscribe(event_pb.SubscribeRequest(resume_revision=0))
    out: list[bytes] = []
    try:
        while True:
            response = await asyncio.wait_for(next_message(call), TIMEOUT)
            for event in response.events:
                if event.revision:
                    out.append(event.SerializeToString())
                if event.revision >= until_revision:
                    return out
    finally:
        call.cancel()


async def head_of(stubs: Stubs) -> tuple[str, int]:
    """The incarnation and head a fresh subscription's Synced names."""
    call = stubs.events.Subscribe(event_pb.SubscribeRequest())
    try:
        while True:
            response = await asyncio.wait_for(next_message(call), TIMEOUT)
            for event in response.events:
                if event.HasField("synced"):
                    return event.synced.incarnation, event.synced.revision
    finally:
        call.cancel()


async def until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Ask `probe` (a coroutine function) until it answers something true."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while not (answer := await probe()):
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)
    return answer


async def a_turn(stubs: Stubs, cwd: str) -> str:
    agent = (await stubs.agents.CreateAgent(create_request(cwd))).agent
    await stubs.turns.SendPrompt(prompt_request(agent.id, "/reply hello from the owner"))
    await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
    return agent.id


async def timeline_of(stubs: Stubs, agent_id: str) -> list[bytes]:
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    return [row.SerializeToString() for row in page.rows]


async def test_every_node_streams_the_owners_events_with_the_same_revisions(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b", "c")) as nodes:
        a, b, c = (nodes.running[name] for name in "abc")
        async with stubs_of(a) as on_a, stubs_of(b) as on_b, stubs_of(c) as on_c:
            agent_id = await a_turn(on_a, str(tmp_path))
            incarnation, head = await head_of(on_a)
            assert head > 3
            seen_by_a = await replay(on_a, head)
            assert len(seen_by_a) == head
            for other in (on_b, on_c):
                assert await replay(other, head) == seen_by_a
                assert (await head_of(other))[0] == incarnation
            rows = await timeline_of(on_a, agent_id)
            assert len(rows) >= 2
            assert await until(lambda: _equal(timeline_of(on_b, agent_id), rows), "b's rows")
            listed_a = await on_a.agents.ListAgents(agent_pb.ListAgentsRequest())
            listed_b = await on_b.agents.ListAgents(agent_pb.ListAgentsRequest())
            assert [x.id for x in listed_b.agents] == [agent_id]
            assert listed_b.agents[0].lifecycle == listed_a.agents[0].lifecycle
            got = await on_c.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
            assert got.agent.title == listed_a.agents[0].title


async def _equal(rows: Awaitable[list[bytes]], expected: list[bytes]) -> bool:
    return await rows == expected


async def test_a_change_on_a_node_that_does_not_own_the_agent_is_refused_with_its_owner(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        a, b = nodes.running["a"], nodes.running["b"]
        async with stubs_of(a) as on_a, stubs_of(b) as on_b:
            agent = (await on_a.agents.CreateAgent(create_request(str(tmp_path)))).agent
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
            request = agent_pb.GetAgentRequest(agent_id=agent.id)
            await until(lambda: _idle(on_b, request), "the agent idle on b")
            _, head = await head_of(on_b)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await on_b.turns.SendPrompt(prompt_request(agent.id, "/reply no"))
            details = error_details(refused.value)
            assert (details.code, details.reason) == (
                grpc.StatusCode.UNAVAILABLE,
                "AGENT_OWNED_ELSEWHERE",
            )
            assert "'a'" in details.message
            assert b.daemon is not None and b.daemon.cluster is not None
            assert b.daemon.cluster.owner_of(agent.id) == "a"
            assert (await head_of(on_b))[1] == head  # nothing was appended
            assert (await head_of(on_a))[1] == head


async def _idle(stubs: Stubs, request: agent_pb.GetAgentRequest) -> bool:
    try:
        return (await stubs.agents.GetAgent(request)).agent.lifecycle.HasField("idle")
    except grpc.aio.AioRpcError:
        return False


async def test_a_restarted_node_resumes_from_its_position_and_agrees_with_the_others(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a:
            await a_turn(on_a, str(tmp_path))
            _, first_head = await head_of(on_a)
            async with stubs_of(nodes.running["b"]) as on_b:
                await replay(on_b, first_head)
            nodes.stop("b")
            await a_turn(on_a, str(tmp_path))  # while b is down
            _, head = await head_of(on_a)
            b = nodes.start("b")
            async with stubs_of(b) as on_b:
                assert await replay(on_b, head) == await replay(on_a, head)
                listed = await on_b.agents.ListAgents(agent_pb.ListAgentsRequest())
                assert len(listed.agents) == 2


async def test_a_node_whose_lease_was_taken_appends_nothing_more(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a",)) as nodes:
        a = nodes.running["a"]
        async with stubs_of(a) as on_a:
            agent = (await on_a.agents.CreateAgent(create_request(str(tmp_path)))).agent
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
            cluster = settings(nats_cluster, nodes.number, "thief")
            client = await connect(nats_cluster)
            try:
                js = client.jetstream()
                log = await EventLog.open(js, cluster.stream, prefix=cluster.prefix)
                # Taken over the owner's head (as if its lease had expired unseen): the
                # key rewritten, the subject claimed.
                kv = await js.key_value(cluster.leases_bucket)
                revision = await kv.put(agent.id, encode("thief", a.clock.now_ms() + 60_000))
                claimed = await log.claim(agent.id, f"thief-{revision}")
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await on_a.turns.SendPrompt(prompt_request(agent.id, "/reply stolen"))
                got = await until(
                    lambda: _errored(on_a, agent.id), "the agent errored on the old owner"
                )
                assert got.lifecycle.errored.error.code == "WRITER_FAILED"
                assert await log.last_sequence(agent.id) == claimed
            finally:
                await client.close()


async def _errored(stubs: Stubs, agent_id: str) -> agent_pb2.Agent | None:
    agent = (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))).agent
    return agent if agent.lifecycle.HasField("errored") else None
