"""The drain on the daemon's FakeClock, through the wire: NOT_SERVING first, every call still
answered during the delay, then new work refused and every stream ended with stream_ending;
and the whole drain bounded by its delay plus its grace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_cli.health import health_stub
from corral_server.app import SERVICE_NAMES, Config, Daemon
from tests.support.client import Stubs, create_request, next_message, prompt_request
from tests.support.daemon import DaemonThread

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def draining() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(drain_delay_s=5.0)).start()
    yield daemon
    daemon.stop()


async def read_until_synced(call: Any) -> list[event_pb.Event]:
    events: list[event_pb.Event] = []
    while not any(e.HasField("synced") for e in events):
        events += (await call.read()).events
    return events


async def test_calls_are_answered_during_the_delay_and_streams_end_after_it(
    draining: DaemonThread, tmp_path: Any
) -> None:
    assert draining.daemon is not None
    daemon: Daemon = draining.daemon
    order: list[str] = []
    # Record when the drain first refuses new work: before the streams end.
    refuse = daemon.manager.refuse_new_work

    def recording_refuse() -> None:
        order.append("refuse, streams open" if daemon.hub.subscriptions else "refuse, ended")
        refuse()

    daemon.manager.refuse_new_work = recording_refuse  # type: ignore[method-assign]
    async with grpc.aio.insecure_channel(draining.address) as channel:
        stubs = Stubs.of(channel)
        health = health_stub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await next_message(watch)).status == SERVING
        stream = stubs.events.Subscribe(event_pb.SubscribeRequest())
        incarnation = (await read_until_synced(stream))[-1].synced.incarnation
        drained = asyncio.run_coroutine_threadsafe(daemon.drain(grace_s=5.0), draining.loop)

        # 1. Health goes NOT_SERVING for the server and every service.
        assert (await next_message(watch)).status == NOT_SERVING
        for service in ("", *SERVICE_NAMES):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == NOT_SERVING
        watch.cancel()  # a Watch stays open until the server stops: it would use the grace
        # 2. During the delay everything is still answered, new work included.
        agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
        await stubs.turns.SendPrompt(prompt_request(agent.id, "/reply still here"))
        late = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent.id]))
        await read_until_synced(late)
        listed = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
        assert agent.id in {a.id for a in listed.agents}
        assert order == [] and not drained.done()

        # 3-5. When the delay has passed on the daemon's clock: refuse, end streams, stop.
        await asyncio.to_thread(draining.clock.wait_for_timer, 5_000)
        await draining.advance_async(5_000)
        for call in (stream, late):
            events: list[event_pb.Event] = []
            while isinstance(response := await call.read(), event_pb.SubscribeResponse):
                events += response.events
            ending = events[-1].stream_ending
            assert ending.resume_revision >= 1 and ending.incarnation == incarnation
        await asyncio.wrap_future(drained)
        assert order[0] == "refuse, streams open"


async def test_a_drain_is_bounded_by_its_delay_and_grace_even_if_agents_hang() -> None:
    daemon = Daemon(Config(listen="127.0.0.1:0", drain_delay_s=0.0))
    await daemon.start()
    never = asyncio.Event()

    async def hung_shutdown() -> None:
        await never.wait()

    daemon.manager.shutdown = hung_shutdown  # type: ignore[method-assign]
    async with asyncio.timeout(10):
        await daemon.drain(grace_s=0.05)
    # The server stopped: a new connection is refused.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await health_stub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
