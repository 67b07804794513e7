"""An owned agent's channel (cluster/channel.py) keeps its lease through a renewal that fails
for a reason other than losing the lease: a NATS request that times out (a loaded node, a
server failing over) is tried again while the lease is still valid, so the agent's writes
go on; only a lease really lost or expired stops them."""

from __future__ import annotations

import asyncio
from typing import cast

import nats.errors
from nats.js.kv import KeyValue

from corral_server.clock import FakeClock
from corral_server.cluster.channel import AgentChannel, ChannelParts
from corral_server.cluster.leases import Leases
from corral_server.cluster.log import Appended, EventLog

LEASE_MS = 10_000


class FlakyBucket:
    """A KV bucket whose first `timeouts` updates time out, as a loaded NATS request does."""

    def __init__(self, timeouts: int) -> None:
        self.revision = 0
        self.timeouts = timeouts
        self.updates = 0

    async def create(self, key: str, value: bytes) -> int:
        self.revision += 1
        return self.revision

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        self.updates += 1
        if self.updates <= self.timeouts:
            raise nats.errors.TimeoutError
        assert last == self.revision
        self.revision += 1
        return self.revision

    async def delete(self, key: str, last: int | None = None) -> bool:
        return True


class Stream:
    """The stream as one agent's channel uses it: claims and appends, numbered."""

    def __init__(self) -> None:
        self.sequence = 0

    async def claim(self, agent: str, owner: str) -> int:
        self.sequence += 1
        return self.sequence

    async def append(self, agent: str, batch: list[bytes], expected: int, msg_id: str) -> Appended:
        assert expected == self.sequence
        self.sequence += 1
        return Appended(self.sequence, duplicate=False)


def applied(sequence: int) -> asyncio.Future[None]:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


async def test_a_renewal_that_timed_out_is_tried_again_and_the_writes_go_on() -> None:
    clock = FakeClock()
    bucket = FlakyBucket(timeouts=1)
    leases = Leases(cast(KeyValue, bucket), "n1", clock, LEASE_MS, 1_000)
    parts = ChannelParts(cast(EventLog, Stream()), leases, clock, applied, 1 << 20)
    channel = AgentChannel("agent", parts)
    try:
        for _ in range(100):  # the lease taken and its renewal waiting on the clock
            if channel.lease is not None and clock.pending_timers:
                break
            await asyncio.sleep(0)
        assert channel.lease is not None and clock.pending_timers
        for _ in range(9):  # three lease durations, a renewal due every third of one
            await clock.advance(LEASE_MS // 3 + 1)
            await asyncio.sleep(0)
        written = channel.send([b"a row"])
        assert written is not None
        await asyncio.wait_for(written, 5)
        assert channel.broken is None
        assert bucket.updates >= 3
    finally:
        await channel.close()


async def test_a_renewal_that_failed_is_tried_again_soon_not_a_third_of_the_lease_later() -> None:
    """Two renewals in a row that time out (a node busy with bursts): the third try still
    comes before the lease's validity ends (expiry less the skew margin), so the agent's
    writes go on. Tried only every third of the lease, the third try would find the lease
    expired."""
    clock = FakeClock()
    bucket = FlakyBucket(timeouts=2)
    leases = Leases(cast(KeyValue, bucket), "n1", clock, LEASE_MS, 1_000)
    parts = ChannelParts(cast(EventLog, Stream()), leases, clock, applied, 1 << 20)
    channel = AgentChannel("agent", parts)
    try:
        for _ in range(100):
            if channel.lease is not None and clock.pending_timers:
                break
            await asyncio.sleep(0)
        assert channel.lease is not None and clock.pending_timers
        for _ in range(3 * LEASE_MS // 250):  # three lease durations, in steps of 250 ms
            await clock.advance(250)
            await asyncio.sleep(0)
            assert channel.broken is None
            assert leases.valid(channel.lease)
        written = channel.send([b"a row"])
        assert written is not None
        await asyncio.wait_for(written, 5)
        assert bucket.updates >= 10  # two timeouts, then one every third of the lease
    finally:
        await channel.close()
