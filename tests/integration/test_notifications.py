"""The notification plan travels on attention_required (docs/design.md#attention), decided by the
clients' presence from Heartbeat, on the daemon's clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, next_message, text
from tests.support.daemon import DaemonThread

NONE, IN_APP, PUSH = (
    event_pb.NOTIFICATION_KIND_NONE,
    event_pb.NOTIFICATION_KIND_IN_APP,
    event_pb.NOTIFICATION_KIND_PUSH,
)


@pytest.fixture
def fresh() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config()).start()
    yield daemon
    daemon.stop()


async def attention_of_a_turn(stubs: Stubs, agent_id: str, *lines: str) -> Any:
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    while not any(e.HasField("synced") for e in (await next_message(watch)).events):
        pass
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    _ = [e async for e in call]
    try:
        while True:
            for event in (await next_message(watch)).events:
                if event.HasField("attention_required"):
                    return event.attention_required
    finally:
        watch.cancel()


async def heartbeat(stubs: Stubs, client_id: str, focused: str, visible: bool = True) -> None:
    request = event_pb.HeartbeatRequest(
        client_id=client_id, client_type="web", focused_agent_id=focused, app_visible=visible
    )
    await stubs.events.Heartbeat(request)


async def test_a_client_watching_the_agent_is_not_notified_one_elsewhere_is(
    fresh: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(fresh.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        await heartbeat(stubs, "web", focused=agent_id)
        first = await attention_of_a_turn(stubs, agent_id, "hello")
        assert first.notification.kind == NONE
        await stubs.agents.ClearAttention(svc_pb.ClearAttentionRequest(agent_ids=[agent_id]))
        await heartbeat(stubs, "web", focused="another-agent")
        second = await attention_of_a_turn(stubs, agent_id, "again")
        assert (second.notification.kind, second.notification.client_id) == (IN_APP, "web")


async def test_nobody_present_gets_a_push_but_not_for_an_error(
    fresh: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(fresh.address) as channel:
        stubs = Stubs.of(channel)
        await heartbeat(stubs, "web", focused="")
        await fresh.advance_async(180_001)  # the heartbeat is too old: nobody is present
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        finished = await attention_of_a_turn(stubs, agent_id, "hello")
        assert finished.notification.kind == PUSH
        other = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        failed = await attention_of_a_turn(stubs, other, "/fail broken")
        assert failed.notification.kind == NONE
