"""The node directory in an R3 KV bucket on three real NATS servers, expiry on a FakeClock: nodes
register and refresh themselves, every node's copy follows the bucket, and CreateAgent's
placement picks the named, or the least loaded, alive node."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import nats.aio.client
import pytest

from corral_server.clock import FakeClock
from corral_server.cluster.nodes import (
    NODE_LABEL,
    NodeDirectory,
    NodeIdTaken,
    NodeNotAlive,
    Settings,
    UnknownNode,
)
from corral_server.rpc.errors import status_code_for

DURATION_MS, SKEW_MS = 9_000, 1_000
_buckets = itertools.count()


async def directories(
    client: nats.aio.client.Client,
    names: tuple[str, ...] = ("a", "b"),
    beside: NodeDirectory | None = None,
    clock: FakeClock | None = None,
) -> tuple[FakeClock, list[NodeDirectory]]:
    """Nodes sharing one clock on one bucket of the test's own (or `beside`'s), the n-th at
    127.0.0.1:5000+n (6000+n beside another)."""
    clock = clock or FakeClock()
    bucket = beside.bucket if beside is not None else f"nodes{next(_buckets)}"
    port = 6000 if beside is not None else 5000
    js = client.jetstream()
    return clock, [
        await NodeDirectory.open(
            js, n, f"127.0.0.1:{port + i}", clock, Settings(bucket, 3, DURATION_MS, SKEW_MS)
        )
        for i, n in enumerate(names)
    ]


async def a_seen_by_b(
    client: nats.aio.client.Client,
) -> tuple[FakeClock, NodeDirectory, NodeDirectory]:
    """Nodes a and b, a registered and in b's copy."""
    clock, (a, b) = await directories(client)
    await a.register()
    await until(lambda: b.alive("a"), "b sees a")
    return clock, a, b


async def until(probe: Callable[[], bool], what: str) -> None:
    """The watch runs on the servers' time: wait (bounded) until every copy shows it."""
    deadline = asyncio.get_running_loop().time() + 10
    while not probe():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def closed(*opened: NodeDirectory) -> None:
    for directory in opened:
        await directory.close()


async def test_a_registered_node_is_seen_by_every_other_node(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await directories(nats_client)
    entry = await a.register(agents=3)
    assert (entry.address, entry.agents) == ("127.0.0.1:5000", 3)
    assert entry.expires_ms == clock.now_ms() + DURATION_MS
    await until(lambda: b.address_of("a") == "127.0.0.1:5000", "b sees a")
    assert b.entry("a") == entry and b.alive("a")
    # A node opened later loads the entries there already.
    _, (c,) = await directories(nats_client, ("c",), beside=a, clock=clock)
    assert c.address_of("a") == "127.0.0.1:5000"
    assert b.address_of("nobody") is None and not b.alive("nobody")
    await closed(a, b, c)


async def test_an_entry_not_refreshed_expires_past_the_skew_margin(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, a, b = await a_seen_by_b(nats_client)
    await clock.advance(DURATION_MS)
    assert b.alive("a")  # expired by its writer's clock, but within the margin
    await clock.advance(SKEW_MS)
    assert not b.alive("a")
    assert b.address_of("a") == "127.0.0.1:5000"  # still known, only not alive
    await closed(a, b)


async def test_a_refreshed_entry_stays_alive_and_reports_the_agents_it_runs(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b) = await directories(nats_client)
    await a.register(agents=0)
    running = [0]
    a.start(lambda: running[0])
    for count in (1, 2, 3, 4):
        running[0] = count
        await asyncio.to_thread(clock.wait_for_timer, DURATION_MS // 3)
        await clock.advance(DURATION_MS // 3)
        await until(seeing(b, "a", count), f"b sees a run {count} agents")
    assert b.alive("a")  # 4 thirds of a duration later, still alive
    await closed(a, b)


def seeing(directory: NodeDirectory, node: str, agents: int) -> Callable[[], bool]:
    """Whether `directory` sees `node` run `agents` agents."""

    def probe() -> bool:
        entry = directory.entry(node)
        return entry is not None and entry.agents == agents

    return probe


async def test_placement_names_a_node_or_picks_the_least_loaded(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (a, b, c) = await directories(nats_client, ("a", "b", "c"))
    await a.register(agents=5)
    await b.register(agents=0)
    await c.register(agents=1)
    await until(lambda: len(a.nodes()) == 3, "a sees every node")
    assert a.place({}) == "a" and a.place({"other": "x"}) == "a"  # the receiving node
    assert a.least_loaded() == "b"
    # A burst of placements counts each at once, before the nodes' next refresh (b runs 0
    # agents, c 1; a tie goes by node id).
    assert [a.place({NODE_LABEL: "*"}) for _ in range(4)] == ["b", "b", "c", "b"]
    assert a.place({NODE_LABEL: "c"}) == "c"
    with pytest.raises(UnknownNode) as unknown:
        a.place({NODE_LABEL: "z"})
    assert status_code_for(unknown.value).name == "INVALID_ARGUMENT"
    assert unknown.value.violations[0].field == "labels[corral.node]"
    assert "nodes: a, b, c" in unknown.value.message
    # b and c stop refreshing; a's copy sees them dead past the margin.
    await clock.advance(DURATION_MS + SKEW_MS)
    await a.register(agents=5)
    with pytest.raises(NodeNotAlive) as dead:
        a.place({NODE_LABEL: "b"})
    assert status_code_for(dead.value).name == "FAILED_PRECONDITION"
    assert dead.value.metadata == {"node": "b"}
    assert a.least_loaded() == "a" and a.place({NODE_LABEL: "*"}) == "a"
    await closed(a, b, c)


async def test_a_second_process_with_one_node_id_is_refused_while_the_first_lives(
    nats_client: nats.aio.client.Client,
) -> None:
    clock, (first,) = await directories(nats_client, ("a",))
    await first.register()
    _, (second,) = await directories(nats_client, ("a",), beside=first, clock=clock)
    with pytest.raises(NodeIdTaken):
        await second.register()
    await clock.advance(DURATION_MS + SKEW_MS)
    taken = await second.register()
    assert taken.address == "127.0.0.1:6000"
    with pytest.raises(NodeIdTaken):
        await first.register()  # its refresh would stop here
    await closed(first, second)


async def test_a_node_restarted_at_its_own_address_takes_its_entry_back_at_once(
    nats_client: nats.aio.client.Client,
) -> None:
    """A crashed node's process started again at once: its entry is still alive, but it is at
    the address the new process has bound, so the process that wrote it is gone."""
    clock, (crashed,) = await directories(nats_client, ("a",))
    await crashed.register()
    settings = Settings(crashed.bucket, 3, DURATION_MS, SKEW_MS)
    restarted = await NodeDirectory.open(
        nats_client.jetstream(), "a", crashed.address, clock, settings
    )
    taken = await restarted.register(agents=2)
    assert (taken.address, taken.agents) == (crashed.address, 2)
    with pytest.raises(NodeIdTaken):
        await crashed.register()  # a process still running under the old entry stops
    await closed(crashed, restarted)


async def test_a_node_that_leaves_is_gone_from_every_copy(
    nats_client: nats.aio.client.Client,
) -> None:
    _, a, b = await a_seen_by_b(nats_client)
    await a.leave()
    await until(lambda: b.entry("a") is None, "a gone from b's copy")
    with pytest.raises(UnknownNode):
        b.place({NODE_LABEL: "a"})
    await closed(b)
