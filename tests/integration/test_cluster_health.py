"""A cluster node's health follows its connection to NATS (docs/cluster.md#read-model): SERVING
once it serves (its read model caught up), NOT_SERVING while every NATS server is gone, SERVING
again once they are back. Its own module: it kills the module's three NATS servers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from corral_cli.health import health_stub
from corral_server.app import Config
from corral_server.cluster.settings import ClusterConfig
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonThread
from tests.support.nats import NatsCluster

TIMEOUT = 30.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def health_becomes(address: str, status: int) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_stub(channel)
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while (await stub.Check(health_pb2.HealthCheckRequest())).status != status:
            assert asyncio.get_running_loop().time() < deadline, f"health never {status}"
            await asyncio.sleep(0.02)


async def test_a_node_whose_read_model_stopped_following_is_not_serving(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    def node(name: str) -> DaemonThread:
        cluster = ClusterConfig(
            tuple(nats_cluster.urls),
            name,
            "127.0.0.1:0",
            stream="STALE",
            prefix="stale.events.",
            leases_bucket="stale_leases",
            nodes_bucket="stale_nodes",
        )
        return DaemonThread(Config(state_dir=tmp_path / name, cluster=cluster)).start()

    a, b = node("a"), node("b")
    try:
        assert a.daemon is not None and a.daemon.cluster is not None
        follower = a.daemon.cluster.follower
        assert follower is not None

        def broken(batch: object) -> None:
            raise RuntimeError("the local database is gone")

        follower._apply = broken  # type: ignore[assignment]
        await health_becomes(a.address, SERVING)
        async with grpc.aio.insecure_channel(b.address) as channel:  # a batch for a to apply
            await Stubs.of(channel).agents.CreateAgent(create_request(str(tmp_path)))
        await health_becomes(a.address, NOT_SERVING)
        await health_becomes(b.address, SERVING)
    finally:
        b.stop()
        a.stop()


async def test_a_node_is_not_serving_while_cut_off_from_nats(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    cluster = ClusterConfig(
        tuple(nats_cluster.urls), "a", "127.0.0.1:0", stream="HEALTH", prefix="health.events."
    )
    node = DaemonThread(Config(state_dir=tmp_path / "a", cluster=cluster)).start()
    try:
        await health_becomes(node.address, SERVING)
        for server in nats_cluster.servers:
            nats_cluster.kill(server.name)
        await health_becomes(node.address, NOT_SERVING)
        for server in nats_cluster.servers:
            server.start()
        await asyncio.to_thread(nats_cluster.wait_for_meta_leader)
        await health_becomes(node.address, SERVING)
    finally:
        node.stop()
