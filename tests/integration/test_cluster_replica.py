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
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.clock import FakeClock
from corral_server.cluster.leases import encode
from corral_server.cluster.log import EventLog
from corral_server.cluster.settings import ClusterConfig
from corral_server.errors import AgentOwnedElsewhere
from corral_server.manager.specs import AgentUpdate
from corral_server.rpc.forward_relay import Forwarding
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
        advertise="127.0.0.1:0",  # the port each node binds
        stream=f"NODES{number}",
        prefix=f"nodes{number}.events.",
        leases_bucket=f"nodes{number}_leases",
        nodes_bucket=f"nodes{number}_nodes",
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

    def start(self, node: str, **config: Any) -> DaemonThread:
        thread = DaemonThread(replace(self.config(node), **config)).start()
        self.running[node] = thread
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
            # The idle agent, as its owner lists it (read again: a snapshot may still move).
            listed_a = await until(lambda: _one_listing(on_a, on_b, on_c), "the same listing")
            incarnation, head = await until(lambda: _one_head(on_a, on_b, on_c), "one head")
            assert head > 3
            seen_by_a = await replay(on_a, head)
            assert len(seen_by_a) == head
            for other in (on_b, on_c):
                assert await replay(other, head) == seen_by_a
                assert await head_of(other) == (incarnation, head)
                rows = await timeline_of(on_a, agent_id)
                assert len(rows) >= 2
                assert await timeline_of(other, agent_id) == rows
            got = await on_c.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
            assert got.agent == listed_a.agents[0]


async def _one_head(*nodes: Stubs) -> tuple[str, int] | None:
    """The incarnation and head every node names, once they name the same."""
    heads = {await head_of(stubs) for stubs in nodes}
    return heads.pop() if len(heads) == 1 else None


async def _one_listing(*nodes: Stubs) -> agent_pb.ListAgentsResponse | None:
    """The listing every node answers, once they answer the same."""
    listings = [await stubs.agents.ListAgents(agent_pb.ListAgentsRequest()) for stubs in nodes]
    return listings[0] if all(listed == listings[0] for listed in listings) else None


async def _lists(stubs: Stubs, count: int) -> bool:
    return len((await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())).agents) == count


async def test_a_change_sent_to_a_node_that_does_not_own_the_agent_reaches_its_owner(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a, stubs_of(nodes.running["b"]) as on_b:
            agent = (await on_a.agents.CreateAgent(create_request(str(tmp_path)))).agent
            request = agent_pb.GetAgentRequest(agent_id=agent.id)
            await until(lambda: _idle(on_b, request), "the agent idle on b")
            await on_b.turns.SendPrompt(prompt_request(agent.id, "/reply sent to b"))
            await on_b.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
            rows = await timeline_of(on_a, agent.id)
            assert b"sent to b" in rows[-1]
            await until(lambda: _same_rows(on_b, agent.id, rows), "b's rows")


async def test_a_change_on_a_node_that_does_not_own_the_agent_is_refused_with_its_owner(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """What forwarding relies on: the node itself refuses a change of another node's agent,
    naming the owner, and appends nothing. Through the wire the call is then forwarded there
    once, and a node that cannot reach the owner answers OWNER_UNREACHABLE."""
    with cluster_of(tmp_path, nats_cluster, ("a",)) as nodes:
        b = nodes.start("b", forwarding=Forwarding("b", lambda agent_id: None, lambda n: None))
        assert b.daemon is not None and b.daemon.cluster is not None
        async with stubs_of(nodes.running["a"]) as on_a, stubs_of(b) as on_b:
            agent = (await on_a.agents.CreateAgent(create_request(str(tmp_path)))).agent
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent.id))
            request = agent_pb.GetAgentRequest(agent_id=agent.id)
            await until(lambda: _idle(on_b, request), "the agent idle on b")
            _, head = await until(lambda: _one_head(on_a, on_b), "one head")
            with pytest.raises(AgentOwnedElsewhere) as refused:
                b.run(b.daemon.manager.update(agent.id, AgentUpdate(title="no")))
            assert (refused.value.reason, refused.value.metadata["node"]) == (
                "AGENT_OWNED_ELSEWHERE",
                "a",
            )
            with pytest.raises(grpc.aio.AioRpcError) as unreachable:
                await on_b.turns.SendPrompt(prompt_request(agent.id, "/reply no"))
            details = error_details(unreachable.value)
            assert (details.code, details.reason) == (
                grpc.StatusCode.UNAVAILABLE,
                "OWNER_UNREACHABLE",
            )
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
                # Listed once the batch is committed, just after its events are published.
                await until(partial(_lists, on_b, 2), "both agents listed on b")


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


async def test_an_owner_restarted_takes_its_agents_back_and_goes_on_writing(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a:
            agent_id = await a_turn(on_a, str(tmp_path))
        nodes.stop("a")  # a clean stop gives its leases up
        a = nodes.start("a")
        assert a.daemon is not None and a.daemon.cluster is not None
        async with stubs_of(a) as on_a, stubs_of(nodes.running["b"]) as on_b:
            await on_a.turns.SendPrompt(prompt_request(agent_id, "/reply after the restart"))
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            assert a.daemon.cluster.owner_of(agent_id) is None  # a owns it again
            b = nodes.running["b"]
            assert b.daemon is not None and b.daemon.cluster is not None
            assert await until(lambda: _owner(b, agent_id, "a"), "b sees a as the owner")
            rows = await timeline_of(on_a, agent_id)
            assert b"after the restart" in rows[-1]
            await until(lambda: _same_rows(on_b, agent_id, rows), "b's rows")
            _, head = await until(lambda: _one_head(on_a, on_b), "one head")
            assert await replay(on_b, head) == await replay(on_a, head)


async def _owner(node: DaemonThread, agent_id: str, owner: str) -> bool:
    assert node.daemon is not None and node.daemon.cluster is not None
    return node.daemon.cluster.owner_of(agent_id) == owner


async def _same_rows(stubs: Stubs, agent_id: str, rows: list[bytes]) -> bool:
    return await timeline_of(stubs, agent_id) == rows


async def test_an_owner_killed_and_restarted_waits_out_its_old_lease_then_writes(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """A node killed holding leases comes back before they expire: it may not take them (only
    an expired lease may be), so its agents' writes wait until they expire, then go on."""
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a:
            agent_id = await a_turn(on_a, str(tmp_path))
        nodes.stop("a")
        cluster = settings(nats_cluster, nodes.number, "a")
        client = await connect(nats_cluster)
        try:  # the lease as the killed node left it: held by a, for a whole duration still
            kv = await client.jetstream().key_value(cluster.leases_bucket)
            await kv.put(agent_id, encode("a", FakeClock().now_ms() + cluster.lease_ms))
        finally:
            await client.close()
        a = nodes.start("a")
        async with stubs_of(a) as on_a, stubs_of(nodes.running["b"]) as on_b:
            _, head = await until(lambda: _one_head(on_a, on_b), "one head")
            sent = asyncio.ensure_future(
                on_a.turns.SendPrompt(prompt_request(agent_id, "/reply once it expired"))
            )
            await asyncio.to_thread(a.clock.wait_for_timer, cluster.lease_ms + cluster.skew_ms)
            assert (await head_of(on_b))[1] == head  # nothing appended while it is held
            await a.advance_async(cluster.lease_ms + cluster.skew_ms)
            await sent
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            rows = await timeline_of(on_a, agent_id)
            assert b"once it expired" in rows[-1]
            await until(lambda: _same_rows(on_b, agent_id, rows), "b's rows")


async def test_a_long_queued_prompt_is_whole_on_every_node(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """The stream carries a queued prompt's whole content (a record stores a long one's summary
    only, its content in a table of its own)."""
    long = "queued " + "x" * 5_000
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a, stubs_of(nodes.running["b"]) as on_b:
            agent = (await on_a.agents.CreateAgent(create_request(str(tmp_path)))).agent
            await on_a.turns.SendPrompt(prompt_request(agent.id, "/sleep 60000"))
            queue = turn_pb.IF_RUNNING_QUEUE
            await on_a.turns.SendPrompt(
                prompt_request(agent.id, long, client_message_id="cm-long", if_running=queue)
            )
            request = turn_pb.GetQueuedPromptRequest(agent_id=agent.id, client_message_id="cm-long")
            on_owner = await on_a.turns.GetQueuedPrompt(request)
            assert on_owner.prompt.content[0].text == long
            await until(lambda: _queued_on(on_b, request), "the queued prompt on b")
            assert await on_b.turns.GetQueuedPrompt(request) == on_owner


async def _queued_on(stubs: Stubs, request: turn_pb.GetQueuedPromptRequest) -> bool:
    try:
        await stubs.turns.GetQueuedPrompt(request)
    except grpc.aio.AioRpcError:
        return False
    return True
