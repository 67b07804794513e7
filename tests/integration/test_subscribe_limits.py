"""Subscribe is bounded, through the wire: ids per subscription, calls per connection, and the
size of every SubscribeResponse."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.rpc.event_service import MAX_SUBSCRIBE_AGENT_IDS
from tests.support.client import Stubs, create_request, error_details, next_message, text
from tests.support.daemon import DaemonThread

MiB = 1 << 20
LOCAL_POOL = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture(scope="module")
def two_streams() -> Iterator[DaemonThread]:
    """A daemon that lets one connection hold at most two calls open."""
    daemon = DaemonThread(Config(max_streams_per_connection=2)).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def isolated() -> Iterator[DaemonThread]:
    """A daemon of this test alone, so its event log holds only this test's events."""
    daemon = DaemonThread(Config()).start()
    yield daemon
    daemon.stop()


async def synced(call: Any) -> list[event_pb.Event]:
    events: list[event_pb.Event] = []
    while not any(e.HasField("synced") for e in events):
        response = await call.read()
        assert response is not grpc.aio.EOF
        events += response.events
    return events


async def test_too_many_agent_ids_are_refused_before_any_work(
    aio_channel: grpc.aio.Channel,
) -> None:
    stubs = Stubs.of(aio_channel)
    ids = [f"{n:032x}" for n in range(MAX_SUBSCRIBE_AGENT_IDS + 1)]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=ids)).read()
    details = error_details(info.value)
    assert details.code is grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("agent_ids",) and "at most 1000" in details.message
    at_limit = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=ids[:-1]))
    assert (await synced(at_limit))[-1].HasField("synced")
    at_limit.cancel()


async def test_an_agent_id_longer_than_the_id_limit_is_refused(
    aio_channel: grpc.aio.Channel,
) -> None:
    stubs = Stubs.of(aio_channel)
    request = event_pb.SubscribeRequest(agent_ids=["a" * 32, "a" * 257])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.events.Subscribe(request).read()
    details = error_details(info.value)
    assert details.code is grpc.StatusCode.INVALID_ARGUMENT
    assert details.fields == ("agent_ids[1]",)


async def test_a_connection_holds_at_most_the_configured_number_of_calls(
    two_streams: DaemonThread,
) -> None:
    async with (
        grpc.aio.insecure_channel(two_streams.address) as first,
        # Its own subchannel pool: channels with equal arguments share one connection.
        grpc.aio.insecure_channel(two_streams.address, options=LOCAL_POOL) as second,
    ):
        stubs = Stubs.of(first)
        held = [stubs.events.Subscribe(event_pb.SubscribeRequest()) for _ in range(2)]
        for call in held:
            await synced(call)
        # A third call on the same connection waits for a free stream (its deadline passes),
        # while another connection is served at once.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=0.5).read()
        assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        other = Stubs.of(second).events.Subscribe(event_pb.SubscribeRequest())
        await synced(other)
        other.cancel()
        # Ending one of the two frees a stream on the first connection.
        held[0].cancel()
        third = stubs.events.Subscribe(event_pb.SubscribeRequest(), timeout=30)
        await synced(third)
        for call in (held[1], third):
            call.cancel()


async def test_no_subscribe_response_exceeds_1_mib_unless_one_event_alone_does(
    isolated: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(isolated.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        live = stubs.events.Subscribe(event_pb.SubscribeRequest())
        await synced(live)
        # A ~900 KB user row, then three ~300 KB reasoning rows: before the fix, batches cut
        # after the event that crossed 1 MiB carried up to 1.2 MB.
        thoughts = [f"/think {n}" + "x" * 300_000 for n in range(3)]
        request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*thoughts))
        ended = [e.WhichOneof("event") async for e in stubs.turns.StreamTurn(request)]
        assert ended[-1] == "turn_completed"
        head = isolated.daemon.hub.head_revision if isolated.daemon else 0
        replay = stubs.events.Subscribe(event_pb.SubscribeRequest(resume_revision=0))
        for call in (live, replay):
            sizes: list[tuple[int, int]] = []
            last = 0
            while last < head:
                response = await next_message(call)
                sizes.append((response.ByteSize(), len(response.events)))
                last = max([last, *(e.revision for e in response.events)])
            assert all(size <= MiB or count == 1 for size, count in sizes), sizes
            assert sum(size for size, _ in sizes) > 1.5 * MiB  # the rows did cross the bound
            call.cancel()
