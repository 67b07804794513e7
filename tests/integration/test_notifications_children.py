"""Attention (docs/design.md#attention) through the wire, where test_notifications.py stops: a child
agent (one with a parent) never notifies anybody, though its attention is set like any agent's;
and attention is an unread mark: once set, a later permission request does not raise it
again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.domain.agent import PARENT_AGENT_ID_LABEL
from tests.integration.test_notifications import attention_of_a_turn, heartbeat
from tests.support.client import Stubs, create_request, next_message, text
from tests.support.daemon import DaemonThread


@pytest.fixture
def fresh() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config()).start()
    yield daemon
    daemon.stop()


async def test_a_child_agent_sets_its_attention_but_never_notifies(
    fresh: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(fresh.address) as channel:
        stubs = Stubs.of(channel)
        parent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        child = (
            await stubs.agents.CreateAgent(
                create_request(str(tmp_path), labels={PARENT_AGENT_ID_LABEL: parent})
            )
        ).agent.id
        await heartbeat(stubs, "web", focused="elsewhere")  # present: a parentless one gets IN_APP
        attention = await attention_of_a_turn(stubs, child, "hello")
        assert attention.notification.kind == event_pb.NOTIFICATION_KIND_NONE
        agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=child))).agent
        assert agent.attention.reason == agent_types_pb.ATTENTION_REASON_FINISHED


async def test_attention_is_not_raised_again_while_its_mark_is_set(
    fresh: DaemonThread, tmp_path: Any
) -> None:
    async with grpc.aio.insecure_channel(fresh.address) as channel:
        stubs = Stubs.of(channel)
        agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
        watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
        while not any(e.HasField("synced") for e in (await next_message(watch)).events):
            pass
        await stubs.turns.SendPrompt(
            turn_pb.SendPromptRequest(agent_id=agent_id, content=text("/permission a"))
        )
        seen: list[Any] = []
        request = None
        while request is None:
            for event in (await next_message(watch)).events:
                seen.append(event)
                if event.HasField("permission_requested"):
                    request = event.permission_requested.permission
        await stubs.turns.RespondToPermission(
            turn_pb.RespondToPermissionRequest(
                agent_id=agent_id,
                request_id=request.id,
                behavior=turn_pb.PERMISSION_BEHAVIOR_ALLOW,
            )
        )
        while not any(e.HasField("turn_completed") for e in seen):
            seen.extend((await next_message(watch)).events)
        # Ended by a permission, then by the turn: the mark was set, so no second event.
        await stubs.turns.SendPrompt(
            turn_pb.SendPromptRequest(agent_id=agent_id, content=text("/permission b"))
        )
        while sum(e.HasField("permission_requested") for e in seen) < 2:
            seen.extend((await next_message(watch)).events)
        watch.cancel()
        reasons = [e.attention_required.reason for e in seen if e.HasField("attention_required")]
        assert reasons == [agent_types_pb.ATTENTION_REASON_PERMISSION]
        await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
