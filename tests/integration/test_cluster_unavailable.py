"""A cluster node whose read model stopped following the stream (here: a NATS TimeoutError,
which is an OSError too) answers a CreateAgent UNAVAILABLE / CLUSTER_UNAVAILABLE with the
reason, never INTERNAL (docs/api.md#errors)."""

from __future__ import annotations

from pathlib import Path

import grpc
import nats.errors
import pytest

from tests.integration.test_cluster_replica import cluster_of, stubs_of
from tests.support.client import create_request, error_details
from tests.support.nats import NatsCluster


async def test_a_create_on_a_node_whose_follower_timed_out_is_unavailable_with_the_reason(
    tmp_path: Path, nats_cluster: NatsCluster
) -> None:
    with cluster_of(tmp_path, nats_cluster, ("a",)) as nodes:
        a = nodes.running["a"]
        assert a.daemon is not None and a.daemon.cluster is not None
        follower = a.daemon.cluster.follower
        assert follower is not None
        a.loop.call_soon_threadsafe(follower._fail, nats.errors.TimeoutError())
        async with stubs_of(a) as on_a:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await on_a.agents.CreateAgent(create_request(str(tmp_path)))
        details = error_details(refused.value)
        assert details.code == grpc.StatusCode.UNAVAILABLE, details
        assert details.reason == "CLUSTER_UNAVAILABLE", details
        assert "TimeoutError" in details.message, details
