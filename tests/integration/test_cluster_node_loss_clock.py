"""Node loss on the injectable clock (docs/cluster.md#node-loss): a node gone with its lease
still in the bucket (as SIGKILL leaves it) and its directory entry gone. No other node takes its
agent before the lease's expiry plus the skew margin; after it (and a sweep), exactly one node
does, however many notice, and the agent is `errored` / NODE_LOST on every node, written once."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import fields
from pathlib import Path

import grpc
import nats.errors

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.clock import FakeClock
from corral_server.cluster.leases import Lease, Leases, encode
from corral_server.cluster.log import EventLog
from tests.integration.test_cluster_replica import (
    _one_head,
    a_turn,
    cluster_of,
    replay,
    settings,
    stubs_of,
    timeline_of,
    until,
)
from tests.support.client import Stubs, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.nats import NatsCluster, connect


async def _agent(stubs: Stubs, agent_id: str) -> agent_pb2.Agent:
    return (await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))).agent


def _lost(agent: agent_pb2.Agent) -> bool:
    lifecycle = agent.lifecycle
    return lifecycle.HasField("errored") and lifecycle.errored.error.code == "NODE_LOST"


async def _swept(node: DaemonThread, count: int) -> bool:
    """Whether the node's sweep for lost nodes ran `count` times (its takeovers done)."""
    assert node.daemon is not None and node.daemon.cluster is not None
    loss = node.daemon.cluster.node_loss
    return loss is not None and loss.sweeps >= count


def _taken(node: DaemonThread, agent_id: str) -> bool:
    assert node.daemon is not None and node.daemon.cluster is not None
    return agent_id in node.daemon.cluster.channels


async def test_a_lost_nodes_agent_is_taken_over_once_after_its_lease_and_the_margin(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a", "b", "c")) as nodes:
        async with stubs_of(nodes.running["a"]) as on_a:
            agent_id = await a_turn(on_a, str(tmp_path))
        nodes.stop("a")  # its directory entry gone, as a dead node's expires
        cluster = settings(nats_cluster, nodes.number, "a")
        client = await connect(nats_cluster)
        try:  # the lease as a killed node leaves it: held by a for a whole duration still
            kv = await client.jetstream().key_value(cluster.leases_bucket)
            await kv.put(agent_id, encode("a", FakeClock().now_ms() + cluster.lease_ms))
        finally:
            await client.close()
        b, c = nodes.running["b"], nodes.running["c"]
        bound = cluster.lease_ms + cluster.skew_ms
        sweep = cluster.lease_ms // 3 + 1
        async with stubs_of(b) as on_b, stubs_of(c) as on_c:
            assert await until(lambda: _one_head(on_b, on_c), "one head")
            # Until the expiry plus the margin, no node takes it (every sweep on the way ran).
            await asyncio.gather(b.advance_async(bound - 1), c.advance_async(bound - 1))
            runs = (bound - 1) // sweep
            await until(lambda: _swept(b, runs), "b's sweeps before the bound")
            await until(lambda: _swept(c, runs), "c's sweeps before the bound")
            assert not _taken(b, agent_id) and not _taken(c, agent_id)
            assert not _lost(await _agent(on_b, agent_id))
            # The next sweep on both nodes at once: one takes it over.
            await asyncio.gather(b.advance_async(sweep), c.advance_async(sweep))

            async def lost_on_both() -> bool:
                agents = [await _agent(stubs, agent_id) for stubs in (on_b, on_c)]
                return all(_lost(agent) for agent in agents)

            await until(lost_on_both, "NODE_LOST on b and c")
            assert _taken(b, agent_id) != _taken(c, agent_id)  # exactly one owner
            _, head = await until(lambda: _one_head(on_b, on_c), "one head")
            events = [event_pb.Event.FromString(data) for data in await replay(on_c, head)]
            lost = [
                e
                for e in events
                if e.HasField("agent_upserted")
                and e.agent_upserted.agent.id == agent_id
                and _lost(e.agent_upserted.agent)
            ]
            assert len(lost) == 1, lost  # written once, by the node that took the lease
            assert "node a was lost" in lost[0].agent_upserted.agent.last_error.message


async def test_an_agent_whose_channel_broke_is_stopped_and_taken_back_errored(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """Its lease taken under the owner's feet (as an outage past the lease would let another
    node do), then left to expire: the owner stops the agent, takes it back from the stream
    once the lease is to be had, errored (WRITER_FAILED) on every node, and writable again."""
    with cluster_of(tmp_path, nats_cluster, ("a", "b")) as nodes:
        a, b = nodes.running["a"], nodes.running["b"]
        cluster = settings(nats_cluster, nodes.number, "a")
        async with stubs_of(a) as on_a, stubs_of(b) as on_b:
            agent_id = await a_turn(on_a, str(tmp_path))
            client = await connect(nats_cluster)
            try:
                js = client.jetstream()
                kv = await js.key_value(cluster.leases_bucket)
                expires = a.clock.now_ms() + 1_000
                revision = await kv.put(agent_id, encode("thief", expires))
                log = await EventLog.open(js, cluster.stream, prefix=cluster.prefix)
                await log.claim(agent_id, f"thief-{revision}")
            finally:
                await client.close()
            with contextlib.suppress(grpc.aio.AioRpcError):  # the write that finds it out
                await on_a.turns.SendPrompt(prompt_request(agent_id, "/reply refused"))
            await until(lambda: _broken(a, agent_id), "a's channel broken")
            # Past the thief's lease and the margin, and a sweep: a takes it back.
            await a.advance_async(1_000 + cluster.skew_ms + cluster.lease_ms // 3 + 1)

            async def mended(stubs: Stubs) -> bool:
                agent = await _agent(stubs, agent_id)
                error = agent.lifecycle.errored.error
                return error.code == "WRITER_FAILED" and "node a stopped writing" in error.message

            await until(lambda: mended(on_b), "errored WRITER_FAILED on b")
            await until(lambda: mended(on_a), "errored WRITER_FAILED on a")
            assert _taken(a, agent_id)
            reloaded = await on_a.agents.ReloadAgent(agent_pb.ReloadAgentRequest(agent_id=agent_id))
            assert reloaded.agent.lifecycle.HasField("idle"), reloaded
            await on_a.turns.SendPrompt(prompt_request(agent_id, "/reply mended"))
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            assert b"mended" in (await timeline_of(on_b, agent_id))[-1]


async def _broken(node: DaemonThread, agent_id: str) -> bool:
    assert node.daemon is not None and node.daemon.cluster is not None
    channel = node.daemon.cluster.channels.get(agent_id)
    return channel is not None and channel.broken is not None


class _Partitioned(Leases):
    """The leases of a node cut off from NATS: no renewal answers."""

    async def renew(self, lease: Lease) -> Lease:
        raise nats.errors.TimeoutError()


async def test_a_node_that_cannot_renew_stops_writing_before_its_lease_could_expire(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    """Partitioned (its renewals unanswered): the owner writes while its lease is valid by its
    clock, and not one append from the expiry less the skew margin on, before any other node
    could take the lease (the expiry plus the margin)."""
    with cluster_of(tmp_path, nats_cluster, ("a",)) as nodes:
        a = nodes.running["a"]
        assert a.daemon is not None and a.daemon.cluster is not None
        node = a.daemon.cluster
        cluster = settings(nats_cluster, nodes.number, "a")
        async with stubs_of(a) as on_a:
            agent_id = await a_turn(on_a, str(tmp_path))
            parts = node._parts
            lease = node.channels[agent_id].lease
            assert parts is not None and lease is not None
            kept = {f.name: getattr(parts.leases, f.name) for f in fields(parts.leases)}
            object.__setattr__(parts, "leases", _Partitioned(**kept))
            valid_until = lease.expires_ms - cluster.skew_ms
            await a.advance_async(valid_until - 1 - a.clock.now_ms())  # renewals fail on the way
            await on_a.turns.SendPrompt(prompt_request(agent_id, "/reply still valid"))
            await on_a.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
            client = await connect(nats_cluster)
            try:
                log = await EventLog.open(client.jetstream(), cluster.stream, prefix=cluster.prefix)
                last = await log.last_sequence(agent_id)
                await a.advance_async(1)  # the expiry less the margin: no more writes
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await on_a.turns.SendPrompt(prompt_request(agent_id, "/reply too late"))
                await until(lambda: _broken(a, agent_id), "a's channel broken")
                assert await log.last_sequence(agent_id) == last
            finally:
                await client.close()
            assert b"still valid" in (await timeline_of(on_a, agent_id))[-1]
