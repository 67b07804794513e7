"""The event log survives SIGKILL of the NATS server leading its stream: appends continue once
the two others elect a leader, and every acknowledged batch is in the stream exactly once."""

from __future__ import annotations

import asyncio

import nats.aio.client

from corral_server.cluster.log import Appended, EventLog, batch_id
from tests.support.nats import NatsCluster

BEFORE, AFTER = 15, 15  # acknowledged batches per agent before the kill, and after it


async def stream_leader(log: EventLog, client: nats.aio.client.Client) -> str:
    info = await client.jetstream().stream_info(log.name)
    assert info.cluster is not None and info.cluster.leader
    return info.cluster.leader


async def write(
    log: EventLog, agent: str, acked: list[tuple[int, bytes]], stop: asyncio.Event
) -> None:
    """One agent's owner: append batches one after another, each expecting the last, until
    told to stop; `acked` gets every acknowledged batch."""
    expected = 0
    number = 0
    while not stop.is_set():
        event = f"{agent}-{number}".encode()
        ack: Appended = await log.append(
            agent, [event], expected, batch_id(agent, "n1", expected), retry_s=30.0
        )
        acked.append((ack.sequence, event))
        expected, number = ack.sequence, number + 1


async def test_no_acknowledged_append_is_lost_when_the_stream_leader_is_killed(
    nats_cluster: NatsCluster, nats_client: nats.aio.client.Client
) -> None:
    log = await EventLog.open(nats_client.jetstream(), name="FAILOVER", prefix="failover.")
    acked: dict[str, list[tuple[int, bytes]]] = {"a": [], "b": []}
    stop = asyncio.Event()
    writers = [asyncio.create_task(write(log, agent, acked[agent], stop)) for agent in acked]
    loop = asyncio.get_running_loop()

    async def until_acked(count: int) -> None:
        deadline = loop.time() + 60
        while min(len(batches) for batches in acked.values()) < count:
            assert loop.time() < deadline, f"fewer than {count} appends acknowledged: {acked}"
            assert not any(writer.done() for writer in writers), [w.exception() for w in writers]
            await asyncio.sleep(0.01)

    await until_acked(BEFORE)
    leader = await stream_leader(log, nats_client)
    await asyncio.to_thread(nats_cluster.kill, leader)
    killed_at = {agent: len(batches) for agent, batches in acked.items()}
    await until_acked(max(killed_at.values()) + AFTER)
    stop.set()
    await asyncio.gather(*writers)
    assert await stream_leader(log, nats_client) != leader

    stored = await log.read(1, limit=100_000)
    for agent, batches in acked.items():
        mine = [(batch.sequence, batch.events[0]) for batch in stored if batch.agent == agent]
        assert mine == batches, agent  # each acknowledged batch once, in order, nothing else
    await asyncio.to_thread(nats_cluster.restart, leader)
