"""EventService over a real grpc.aio server on a loopback port: the hub's framed batches must
decode as real SubscribeResponse messages, and the servicer must validate, clean up on
cancel, and end streams on drain.

The encoder here is a small stand-in for rpc/convert.py: real corral.v1.Event messages,
carrying only the fields these tests look at.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import timeline_pb2 as timeline_pb
from corral_server.domain.agent import Agent
from corral_server.domain.events import (
    AgentRemoved,
    AgentUpserted,
    Event,
    RowAppended,
    StreamControl,
    StreamEnding,
    SubscriptionReset,
    Synced,
)
from corral_server.domain.timeline import AssistantMessage, TimelineRow
from corral_server.hub import EventHub, Subscription, SubscriptionState
from corral_server.rpc.event_service import EventServicer
from tests.support.fakes import idle_agent as agent


def event_to_pb(revision: int, event: Event | StreamControl) -> event_pb.Event:
    match event:
        case AgentUpserted(agent=agent):
            upsert = event_pb.AgentUpserted(
                agent=agent_pb.Agent(id=agent.id, provider=agent.provider)
            )
            return event_pb.Event(revision=revision, agent_upserted=upsert)
        case AgentRemoved(agent_id=agent_id):
            removed = event_pb.AgentRemoved(agent_id=agent_id)
            return event_pb.Event(revision=revision, agent_removed=removed)
        case RowAppended(agent_id=agent_id, epoch=epoch, row=row):
            text = row.item.text if isinstance(row.item, AssistantMessage) else ""
            item = timeline_pb.TimelineItem(
                assistant_message=timeline_pb.AssistantMessage(text=text)
            )
            appended = event_pb.TimelineRowAppended(
                agent_id=agent_id, epoch=epoch, row=timeline_pb.TimelineRow(seq=row.seq, item=item)
            )
            return event_pb.Event(revision=revision, timeline_row_appended=appended)
        case Synced(revision=synced, reset=reset):
            return event_pb.Event(
                revision=revision, synced=event_pb.Synced(revision=synced, reset=reset)
            )
        case SubscriptionReset(
            requested_revision=requested, earliest_revision=earliest, reason=why
        ):
            reset_pb = event_pb.SubscriptionReset(
                requested_revision=requested, earliest_revision=earliest, reason=why
            )
            return event_pb.Event(revision=revision, subscription_reset=reset_pb)
        case StreamEnding(resume_revision=resume, reason=why):
            ending = event_pb.StreamEnding(resume_revision=resume, reason=why)
            return event_pb.Event(revision=revision, stream_ending=ending)
        case _:
            raise NotImplementedError(type(event).__name__)


def encode(revision: int, event: Event | StreamControl) -> bytes:
    return event_to_pb(revision, event).SerializeToString()


def describe(event: event_pb.Event) -> str:
    """One line per event, for stating exact streams."""
    match event.WhichOneof("payload"):
        case "agent_upserted":
            return f"{event.revision}:upsert {event.agent_upserted.agent.id}"
        case "timeline_row_appended":
            appended = event.timeline_row_appended
            return f"{event.revision}:row {appended.agent_id} {appended.row.seq}"
        case "synced":
            reset = " reset" if event.synced.reset else ""
            return f"{event.revision}:synced {event.synced.revision}{reset}"
        case "subscription_reset":
            reset_pb = event.subscription_reset
            return (
                f"{event.revision}:reset {reset_pb.requested_revision} {reset_pb.earliest_revision}"
            )
        case "stream_ending":
            return f"{event.revision}:ending {event.stream_ending.resume_revision}"
        case other:
            return f"{event.revision}:{other}"


def row(agent_id: str, seq: int) -> RowAppended:
    # About the size of a short assistant reply.
    return RowAppended(agent_id, "e1", TimelineRow(seq, 0, AssistantMessage(f"reply {seq} " * 12)))


def rows(agent_id: str, seqs: range, first_revision: int) -> list[str]:
    return [f"{first_revision + i}:row {agent_id} {seq}" for i, seq in enumerate(seqs)]


@dataclass
class Agents:
    ids: list[str] = field(default_factory=list)

    def __call__(self, scope: frozenset[str]) -> Sequence[Agent]:
        return [agent(i) for i in self.ids if not scope or i in scope]


@dataclass
class Served:
    hub: EventHub
    agents: Agents
    servicer: EventServicer
    channel: grpc.aio.Channel
    stub: event_grpc.EventServiceAsyncStub
    address: str


StartServer = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve() -> AsyncIterator[StartServer]:
    """Starts a server around a fresh hub (as many as a test needs) and stops them all."""
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []

    async def start(**hub_options: Any) -> Served:
        hub = EventHub(encode, **hub_options)
        agents = Agents()
        servicer = EventServicer(hub, agents)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((servicer.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        address = f"127.0.0.1:{port}"
        channel = grpc.aio.insecure_channel(address)
        channels.append(channel)
        stub = event_grpc.EventServiceStub(channel)
        return Served(hub, agents, servicer, channel, stub, address)

    yield start
    for channel in channels:
        await channel.close()
    for server in servers:
        await server.stop(None)


def request(*agent_ids: str, resume: int | None = None) -> event_pb.SubscribeRequest:
    req = event_pb.SubscribeRequest(agent_ids=list(agent_ids))
    if resume is not None:
        req.resume_revision = resume
    return req


async def read_events(
    call: grpc.aio.UnaryStreamCall[event_pb.SubscribeRequest, event_pb.SubscribeResponse],
    count: int,
) -> list[str]:
    """Read whole responses until at least `count` events have arrived (5 s guard)."""
    items: list[str] = []
    async with asyncio.timeout(5):
        while len(items) < count:
            response = await call.read()
            assert isinstance(response, event_pb.SubscribeResponse), response
            items += [describe(event) for event in response.events]
    return items


def only_subscription(hub: EventHub) -> Subscription:
    (subscription,) = hub.subscriptions
    return subscription


def error_details(error: grpc.aio.AioRpcError) -> tuple[str, list[str]]:
    """The ErrorInfo reason and the BadRequest fields carried in the status details."""
    raw = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    assert isinstance(raw, bytes)
    status = status_pb2.Status.FromString(raw)
    reason, fields = "", []
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(info):
            assert info.domain == "corral.dev"
            reason = info.reason
        elif detail.Unpack(bad):
            fields = [v.field for v in bad.field_violations]
    return reason, fields


async def test_a_fresh_subscription_streams_snapshot_synced_then_live_events(
    serve: StartServer,
) -> None:
    s = await serve()
    s.agents.ids = ["a1", "a2"]
    s.hub.publish(row("a1", 1))
    call = s.stub.Subscribe(request())
    assert await read_events(call, 3) == ["0:upsert a1", "0:upsert a2", "0:synced 1"]
    s.hub.publish(row("a2", 1))
    s.hub.publish(AgentRemoved("a1"))
    assert await read_events(call, 2) == ["2:row a2 1", "3:agent_removed"]
    call.cancel()


async def test_two_streams_with_the_same_scope_receive_identical_events(serve: StartServer) -> None:
    s = await serve()
    s.agents.ids = ["a1"]
    first, second = s.stub.Subscribe(request("a1")), s.stub.Subscribe(request("a1"))
    assert await read_events(first, 2) == await read_events(second, 2)
    for seq in range(1, 301):
        s.hub.publish(row("a1", seq))
        s.hub.publish(row("a2", seq))
    expected = [f"{2 * seq - 1}:row a1 {seq}" for seq in range(1, 301)]
    assert await read_events(first, 300) == expected
    assert await read_events(second, 300) == expected
    first.cancel()
    second.cancel()


async def test_unknown_agent_ids_may_be_subscribed_before_the_agent_exists(
    serve: StartServer,
) -> None:
    s = await serve()
    call = s.stub.Subscribe(request("later"))
    assert await read_events(call, 1) == ["0:synced 0"]
    s.hub.publish(row("other", 1))
    s.agents.ids = ["later"]
    s.hub.publish(AgentUpserted(agent("later")))
    assert await read_events(call, 1) == ["2:upsert later"]
    call.cancel()


async def test_resume_inside_the_window_replays_exactly_the_missed_events(
    serve: StartServer,
) -> None:
    s = await serve()
    for seq in range(1, 11):
        s.hub.publish(row("a1", seq))
    call = s.stub.Subscribe(request(resume=7))
    assert await read_events(call, 4) == [*rows("a1", range(8, 11), 8), "0:synced 10"]
    call.cancel()


async def test_resume_outside_the_window_gets_reset_snapshot_and_synced_reset(
    serve: StartServer,
) -> None:
    s = await serve(retain_events=4)
    s.agents.ids = ["a1"]
    for seq in range(1, 11):
        s.hub.publish(row("a1", seq))
    call = s.stub.Subscribe(request(resume=3))
    assert await read_events(call, 3) == ["0:reset 3 6", "0:upsert a1", "0:synced 10 reset"]
    call.cancel()


async def test_a_burst_arrives_as_few_messages_of_many_events(serve: StartServer) -> None:
    s = await serve(batch_events=512)
    call = s.stub.Subscribe(request())
    assert await read_events(call, 1) == ["0:synced 0"]
    for seq in range(1, 2_001):
        s.hub.publish(row("a1", seq))
    sizes: list[int] = []
    async with asyncio.timeout(5):
        while sum(sizes) < 2_000:
            response = await call.read()
            assert isinstance(response, event_pb.SubscribeResponse)
            sizes.append(len(response.events))
    # The first batches are bounded by the stream's credit (16 KiB, doubling as the client
    # reads: rpc/streams.py), the later ones by batch_events.
    assert len(sizes) <= 6 and sizes.count(512) >= 2
    assert sizes == sorted(sizes[:-1]) + sizes[-1:]
    call.cancel()


@pytest.mark.parametrize(
    ("retain_events", "resets"), [(100_000, False), (1_000, True)], ids=["replay", "reset"]
)
async def test_a_stream_that_stops_reading_does_not_hold_back_the_others(
    serve: StartServer, retain_events: int, resets: bool
) -> None:
    s = await serve(buffer_events=64, retain_events=retain_events)
    # The slow client's connection window stays small, so its stream stalls quickly.
    slow_channel = grpc.aio.insecure_channel(
        s.address, options=[("grpc.http2.lookahead_bytes", 16_384), ("grpc.http2.bdp_probe", 0)]
    )
    slow = event_grpc.EventServiceStub(slow_channel).Subscribe(request())
    assert await read_events(slow, 1) == ["0:synced 0"]
    slow_sub = only_subscription(s.hub)
    fast = s.stub.Subscribe(request())
    fast_items = await read_events(fast, 1)
    for chunk in range(100):
        for seq in range(chunk * 50 + 1, chunk * 50 + 51):
            s.hub.publish(row("a1", seq))
        fast_items += await read_events(fast, 50)
    assert fast_items == ["0:synced 0", *rows("a1", range(1, 5_001), 1)]
    # The hub handed the slow stream nothing past its full buffer.
    assert slow_sub.state is SubscriptionState.CATCHING_UP
    assert slow_sub.buffered_events <= 64
    if resets:
        # What it was handed before it lagged, then an explicit reset: ring holds 4001-5000.
        handed = slow_sub.position
        assert await read_events(slow, handed + 2) == [
            *rows("a1", range(1, handed + 1), 1),
            f"0:reset {handed} 4000",
            "0:synced 5000 reset",
        ]
    else:
        assert await read_events(slow, 5_000) == rows("a1", range(1, 5_001), 1)
    s.hub.publish(row("a1", 5_001))
    assert await read_events(slow, 1) == ["5001:row a1 5001"]
    slow.cancel()
    fast.cancel()
    await slow_channel.close()


async def test_end_all_ends_each_stream_with_a_resume_point_that_replays_the_rest(
    serve: StartServer,
) -> None:
    s = await serve()
    history = [row("a1", seq) for seq in range(1, 21)]
    call = s.stub.Subscribe(request())
    assert await read_events(call, 1) == ["0:synced 0"]
    for event in history[:10]:
        s.hub.publish(event)
    s.hub.end_all("draining")
    before = await read_events(call, 11)
    assert before[-1] == "0:ending 10"
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    # The restarted server has the same history and more; the resume continues exactly.
    restarted = await serve()
    for event in history:
        restarted.hub.publish(event)
    resumed = restarted.stub.Subscribe(request(resume=10))
    after = await read_events(resumed, 11)
    assert before[:-1] + after == [*rows("a1", range(1, 21), 1), "0:synced 20"]
    resumed.cancel()


async def test_subscribing_while_draining_is_unavailable_with_shutting_down(
    serve: StartServer,
) -> None:
    s = await serve()
    s.hub.end_all("draining")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await s.stub.Subscribe(request()).read()
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_details(raised.value) == ("SHUTTING_DOWN", [])


@pytest.mark.parametrize(
    ("agent_ids", "fields"),
    [
        (["a1", ""], ["agent_ids[1]"]),
        (["a1", "a2", "a1"], ["agent_ids[2]"]),
        (["", ""], ["agent_ids[0]", "agent_ids[1]"]),
    ],
)
async def test_a_bad_scope_is_invalid_argument_with_field_violations(
    serve: StartServer, agent_ids: list[str], fields: list[str]
) -> None:
    s = await serve()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await s.stub.Subscribe(request(*agent_ids)).read()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_details(raised.value) == ("INVALID_ARGUMENT", fields)
    assert s.hub.subscriptions == ()


async def test_a_cancelled_call_closes_its_subscription(serve: StartServer) -> None:
    s = await serve()
    call = s.stub.Subscribe(request())
    assert await read_events(call, 1) == ["0:synced 0"]
    subscription = only_subscription(s.hub)
    call.cancel()
    await asyncio.wait_for(subscription.wait_closed(), 5)
    assert s.hub.subscriptions == ()
    s.hub.publish(row("a1", 1))
    assert subscription.buffered_events == 0


async def test_heartbeat_records_presence_per_client(serve: StartServer) -> None:
    s = await serve()
    heartbeat = event_pb.HeartbeatRequest(client_id="phone", client_type="ios", app_visible=True)
    heartbeat.last_activity_at.FromMilliseconds(1_700_000_000_123)
    assert await s.stub.Heartbeat(heartbeat) == event_pb.HeartbeatResponse()
    presence = s.servicer.presence["phone"]
    assert (presence.client_type, presence.app_visible) == ("ios", True)
    assert presence.active_at_ms == 1_700_000_000_123


async def test_a_heartbeat_without_a_client_id_is_invalid_argument(serve: StartServer) -> None:
    s = await serve()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await s.stub.Heartbeat(event_pb.HeartbeatRequest(client_type="cli"))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_details(raised.value) == ("INVALID_ARGUMENT", ["client_id"])
    assert s.servicer.presence == {}
