"""Agent leases in an R3 KV bucket on three real NATS servers, expiry on a FakeClock."""

from __future__ import annotations

import asyncio
import itertools

import nats.aio.client
import pytest

from corral_server.clock import FakeClock
from corral_server.cluster.leases import LeaseHeld, LeaseLost, Leases
from corral_server.cluster.log import EventLog, Fenced, batch_id

DURATION_MS, SKEW_MS = 10_000, 1_000
_buckets = itertools.count()


async def nodes(
    client: nats.aio.client.Client, names: tuple[str, ...] = ("a", "b")
) -> tuple[FakeClock, list[Leases]]:
    """Nodes (a and b) on one bucket of the test's own, sharing one clock."""
    clock = FakeClock()
    bucket = f"leases{next(_buckets)}"
    js = client.jetstream()
    return clock, [
        await Leases.open(js, name, clock, bucket, duration_ms=DURATION_MS, skew_ms=SKEW_MS)
        for name in names
    ]


async def held_by(leases: Leases, agent: str) -> str | None:
    holder = await leases.holder(agent)
    return None if holder is None else holder.node


async def test_a_held_lease_is_refused_to_another_node_until_it_expires(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await nodes(nats_client)
    lease = await a.acquire("agent1")
    assert (lease.node, lease.expires_ms) == ("a", clock.now_ms() + DURATION_MS)
    with pytest.raises(LeaseHeld) as held:
        await b.acquire("agent1")
    assert (held.value.node, held.value.expires_ms) == ("a", lease.expires_ms)
    # Expired by a's clock, but not past the skew margin: b still waits.
    await clock.advance(DURATION_MS)
    assert not a.valid(lease)
    with pytest.raises(LeaseHeld):
        await b.acquire("agent1")
    await clock.advance(SKEW_MS)
    taken = await b.acquire("agent1")
    assert taken.node == "b" and taken.epoch > lease.epoch
    assert await held_by(a, "agent1") == "b"


async def test_a_renew_after_another_node_took_the_lease_fails(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await nodes(nats_client)
    lease = await a.acquire("agent1")
    await clock.advance(DURATION_MS + SKEW_MS)
    await b.acquire("agent1")
    with pytest.raises(LeaseLost):
        await a.renew(lease)
    with pytest.raises(LeaseLost):
        await a.release(lease)
    assert await held_by(b, "agent1") == "b"


async def test_a_renew_that_is_late_by_the_holders_clock_fails_without_writing(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a,) = await nodes(nats_client, ("a",))
    lease = await a.acquire("agent1")
    await clock.advance(DURATION_MS - SKEW_MS)
    with pytest.raises(LeaseLost):
        await a.renew(lease)
    holder = await a.holder("agent1")
    assert holder is not None and holder.revision == lease.revision


async def test_renewing_keeps_the_lease_past_its_first_expiry(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await nodes(nats_client)
    lease = await a.acquire("agent1")
    for _ in range(3):
        await clock.advance(DURATION_MS // 2)
        lease = await a.renew(lease)
    await clock.advance((DURATION_MS + SKEW_MS) // 2)
    with pytest.raises(LeaseHeld):
        await b.acquire("agent1")
    assert a.valid(lease)
    assert lease.epoch < lease.revision  # a tenure keeps its epoch across renewals


async def test_a_released_lease_is_free_at_once(nats_client: nats.aio.client.Client) -> None:
    _, (a, b) = await nodes(nats_client)
    lease = await a.acquire("agent1")
    await a.release(lease)
    assert await held_by(a, "agent1") is None
    assert (await b.acquire("agent1")).node == "b"


async def test_two_nodes_taking_one_expired_lease_at_once_get_it_once(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b, c) = await nodes(nats_client, ("a", "b", "c"))
    await a.acquire("agent1")
    await clock.advance(DURATION_MS + SKEW_MS)
    results = await asyncio.gather(b.acquire("agent1"), c.acquire("agent1"), return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert [type(r) for r in results if isinstance(r, BaseException)] == [LeaseHeld]
    assert await held_by(a, "agent1") == winners[0].node


async def test_the_node_that_lost_an_agents_lease_cannot_append_one_more_event(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await nodes(nats_client)
    log = await EventLog.open(nats_client.jetstream(), name="HANDOVER", prefix="handover.")
    old = await a.acquire("agent1")
    start = await log.claim("agent1", old.owner)
    mine = await log.append("agent1", [b"a1"], start, batch_id("agent1", old.owner, start))
    await clock.advance(DURATION_MS + SKEW_MS)
    new = await b.acquire("agent1")
    start = await log.claim("agent1", new.owner)
    # a has not noticed yet: its next append expects its own last batch, and is refused.
    with pytest.raises(Fenced):
        await log.append(
            "agent1", [b"a2"], mine.sequence, batch_id("agent1", old.owner, mine.sequence)
        )
    await log.append("agent1", [b"b1"], start, batch_id("agent1", new.owner, start))
    stored = [(batch.owner, batch.events) for batch in await log.read(1)]
    assert stored == [(old.owner, ()), (None, (b"a1",)), (new.owner, ()), (None, (b"b1",))]
