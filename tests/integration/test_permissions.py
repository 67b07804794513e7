"""Permissions through the wire (docs/design.md#permissions), on the scripted provider's
`/permission NAME`: pending on the agent and as events, answered by RespondToPermission (the
receipt before any client sees the resolution), ended with their turn, bad answers refused."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import Stubs, create_request, error_details, next_message, text

ALLOW, DENY = turn_pb.PERMISSION_BEHAVIOR_ALLOW, turn_pb.PERMISSION_BEHAVIOR_DENY


async def asking_turn(stubs: Stubs, cwd: Any, *lines: str) -> tuple[str, Any, Any]:
    """An agent whose turn waits on a permission: its id, the StreamTurn call, the request."""
    agent_id = (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    while (event := await next_message(call)).WhichOneof("event") != "permission_requested":
        pass
    return agent_id, call, event.permission_requested


def tool_calls(events: list[turn_pb.StreamTurnResponse]) -> list[Any]:
    return [e.row.item.tool_call for e in events if e.row.item.HasField("tool_call")]


async def rest_of(call: Any) -> list[turn_pb.StreamTurnResponse]:
    events = []
    while (event := await call.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


async def test_a_permission_is_pending_then_allowed_and_the_turn_goes_on(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call, asked = await asking_turn(stubs, tmp_path, "/permission write", "/reply done")
    assert asked.permission.name == "write" and asked.turn_id == asked.permission.turn_id
    agent = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert [p.id for p in agent.pending_permissions] == [asked.permission.id]
    assert agent.attention.reason == agent_types_pb.ATTENTION_REASON_PERMISSION
    waited = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=agent_id))
    assert waited.status == turn_pb.WAIT_STATUS_PERMISSION
    reply = await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id,
            request_id=asked.permission.id,
            behavior=ALLOW,
            selected_action_id="allow",
        )
    )
    assert not reply.agent.pending_permissions
    events = await rest_of(call)
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds.count("permission_resolved") == 1  # the provider's echo is dropped
    resolved = events[kinds.index("permission_resolved")].permission_resolved
    assert (resolved.behavior, resolved.canceled) == (ALLOW, False)
    tools = [
        e.row.item.tool_call
        for e in events
        if e.HasField("row") and e.row.item.HasField("tool_call")
    ]
    assert tools[-1].status == 3  # COMPLETED
    assert kinds[-1] == "turn_completed"


async def test_a_denied_permission_fails_its_tool_with_the_message(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call, asked = await asking_turn(stubs, tmp_path, "/permission rm")
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(
            agent_id=agent_id, request_id=asked.permission.id, behavior=DENY, message="not today"
        )
    )
    events = await rest_of(call)
    tools = [
        e.row.item.tool_call
        for e in events
        if e.HasField("row") and e.row.item.HasField("tool_call")
    ]
    assert tools[-1].error == "permission denied: not today"


async def test_bad_answers_are_refused_and_change_nothing(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call, asked = await asking_turn(stubs, tmp_path, "/permission write")
    before = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    bad = [
        (
            {"request_id": "nope", "behavior": ALLOW},
            grpc.StatusCode.NOT_FOUND,
            "PERMISSION_NOT_FOUND",
        ),
        ({"request_id": asked.permission.id}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        (
            {"request_id": asked.permission.id, "behavior": ALLOW, "selected_action_id": "x"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
    ]
    for fields, code, reason in bad:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stubs.turns.RespondToPermission(
                turn_pb.RespondToPermissionRequest(agent_id=agent_id, **fields)
            )
        details = error_details(raised.value)
        assert (details.code, details.reason) == (code, reason), fields
    after = (await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert after == before
    await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    await rest_of(call)


async def test_a_canceled_turn_ends_its_pending_permissions(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id, call, asked = await asking_turn(stubs, tmp_path, "/permission write")
    reply = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert reply.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    assert not reply.agent.pending_permissions
    events = await rest_of(call)
    kinds = [e.WhichOneof("event") for e in events]
    resolved = events[kinds.index("permission_resolved")].permission_resolved
    assert resolved.canceled and resolved.request_id == asked.permission.id
    assert kinds[-1] == "turn_canceled"
