"""Fixtures of the cluster tests: three real NATS servers per test module, a client per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import nats.aio.client
import pytest

from tests.support.nats import NatsCluster, connect, running_nats_cluster


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    with running_nats_cluster(tmp_path_factory.mktemp("nats")) as cluster:
        yield cluster


@pytest.fixture
async def nats_client(nats_cluster: NatsCluster) -> AsyncIterator[nats.aio.client.Client]:
    client = await connect(nats_cluster)
    yield client
    await client.close()
