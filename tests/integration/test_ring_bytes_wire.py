"""Through the wire: the daemon's event ring is bounded in bytes (Config.retain_bytes) as well
as in events, and a resume point the byte budget evicted gets an explicit reset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral_server.app import Config
from tests.integration.test_subscribe import Reader, run_turn
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonThread


@pytest.fixture(scope="module")
def byte_bound_daemon() -> Iterator[DaemonThread]:
    """Retains up to 100,000 events but only 4,000 bytes of them."""
    daemon = DaemonThread(Config(retain_events=100_000, retain_bytes=4_000)).start()
    yield daemon
    daemon.stop()


async def test_a_resume_point_evicted_by_the_byte_budget_gets_a_reset(
    byte_bound_daemon: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(byte_bound_daemon.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        # 100 reasoning rows of ~100 bytes each: far more bytes than retained, far fewer
        # events than the event bound.
        await run_turn(stubs, agent_id, *[f"/think thought number {i:03d}" for i in range(100)])
        reader = Reader(stubs, resume_revision=1)
        synced = await reader.synced()
        reset = reader.events[0]
        assert reset.WhichOneof("payload") == "subscription_reset"
        assert reset.subscription_reset.requested_revision == 1
        assert 30 < reset.subscription_reset.earliest_revision < synced.synced.revision
        assert synced.synced.reset
        # Inside what the budget kept, a resume replays without a reset.
        kept = Reader(stubs, resume_revision=reset.subscription_reset.earliest_revision)
        await kept.synced()
        assert kept.events[0].WhichOneof("payload") != "subscription_reset"
        reader.call.cancel()
        kept.call.cancel()
