"""TurnService through the wire: foreground turns, busy agents, cancel outcomes."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from corral.v1 import agent_pb2 as agent_types_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from tests.support.client import (
    Stubs,
    create_request,
    error_details,
    next_message,
    prompt_request,
    text,
)
from tests.support.daemon import DaemonThread


async def new_agent(stubs: Stubs, cwd: Any) -> str:
    return (await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id


async def collect_turn(
    stubs: Stubs, agent_id: str, *lines: str
) -> list[turn_pb.StreamTurnResponse]:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    return [event async for event in call]


async def wait_for_state(stubs: Stubs, agent_id: str, state: str) -> Any:
    """The agent once it is in `state`: from the subscription's snapshot, or the first live
    upsert that brings it there (no polling)."""
    call = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]))
    try:
        async for response in call:
            for event in response.events:
                agent = event.agent_upserted.agent
                if (
                    event.HasField("agent_upserted")
                    and agent.lifecycle.WhichOneof("state") == state
                ):
                    return agent
    finally:
        call.cancel()
    raise AssertionError(f"stream ended before the agent reached {state}")


async def wait_for_timer(daemon: DaemonThread, due_in_ms: int) -> None:
    """Until the daemon has armed a timer due `due_in_ms` from now (the server arms it on its
    own thread after our RPC arrives)."""
    await asyncio.to_thread(daemon.clock.wait_for_timer, due_in_ms)


async def test_stream_turn_yields_started_rows_then_one_terminal(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    events = await collect_turn(stubs, agent_id, "hello world")
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "turn_started"
    assert kinds[-2:] == ["usage", "turn_completed"]
    assert (
        events[-2].usage.input_tokens == 2 and events[-2].usage == events[-1].turn_completed.usage
    )
    assert kinds.count("turn_completed") == 1
    rows = [e.row for e in events if e.WhichOneof("event") == "row"]
    assert rows[0].item.user_message.text == "hello world"
    assistant = [
        r.item.assistant_message.text for r in rows if r.item.HasField("assistant_message")
    ]
    assert assistant == ["You said: hello world"]  # chunks coalesced into one row
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    turn_id = events[0].turn_started.turn_id
    assert all(r.turn_id == turn_id for r in rows)
    agent = await wait_for_state(stubs, agent_id, "idle")
    assert agent.last_usage.output_tokens > 0


async def test_send_prompt_returns_a_turn_and_the_timeline_records_it(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    resp = await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/think hmm", "/reply done", client_message_id="m1")
    )
    assert resp.disposition == turn_pb.PROMPT_DISPOSITION_STARTED and resp.turn_id
    await wait_for_state(stubs, agent_id, "idle")
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    kinds = [r.item.WhichOneof("kind") for r in page.rows]
    assert kinds == ["user_message", "reasoning", "assistant_message"]
    assert page.rows[0].item.user_message.client_message_id == "m1"
    assert page.rows[2].item.assistant_message.text == "done"


async def test_a_second_foreground_turn_is_rejected_as_busy(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    first = await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 1000", "/reply slow"))
    await wait_for_state(stubs, agent_id, "running")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.turns.SendPrompt(prompt_request(agent_id, "again"))
    details = error_details(info.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION
    assert details.reason == "AGENT_BUSY"
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert [r.item.user_message.text for r in page.rows] == ["/sleep 1000\n/reply slow"]
    await wait_for_timer(daemon, 1000)  # the script's /sleep
    await daemon.advance_async(1000)
    agent = await wait_for_state(stubs, agent_id, "idle")
    assert agent.lifecycle.WhichOneof("state") == "idle" and first.turn_id


async def test_a_failing_turn_leaves_the_agent_errored_with_the_error(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    events = await collect_turn(stubs, agent_id, "/fail disk full")
    assert events[-1].WhichOneof("event") == "turn_failed"
    assert events[-1].turn_failed.error.message == "disk full"
    agent = await wait_for_state(stubs, agent_id, "errored")
    assert agent.lifecycle.errored.error.message == "disk full"
    assert (
        agent.attention.required and agent.attention.reason == agent_types_pb.ATTENTION_REASON_ERROR
    )
    # An errored agent takes the next prompt.
    events = await collect_turn(stubs, agent_id, "retry")
    assert events[-1].WhichOneof("event") == "turn_completed"


async def test_cancel_without_a_running_turn_is_not_running(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    resp = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert resp.outcome == turn_pb.CANCEL_OUTCOME_NOT_RUNNING


async def test_cancel_of_a_running_turn_settles_with_turn_canceled(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("/sleep 60000"))
    )
    first = await next_message(call)
    assert first.WhichOneof("event") == "turn_started"
    resp = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert resp.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    rest = []
    while isinstance(event := await call.read(), turn_pb.StreamTurnResponse):
        rest.append(event)
    assert rest[-1].WhichOneof("event") == "turn_canceled"
    assert resp.agent.lifecycle.WhichOneof("state") == "idle"


async def test_cancel_refused_by_the_provider_is_refused_and_the_turn_goes_on(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = await new_agent(stubs, tmp_path)
    await stubs.turns.SendPrompt(
        prompt_request(agent_id, "/refuse-interrupt", "/sleep 60000", "/reply end")
    )
    await wait_for_state(stubs, agent_id, "running")
    cancel = asyncio.ensure_future(
        stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    )
    # The provider refuses at once; the manager then waits `settle_s` (10 s on the daemon's
    # clock) for the turn to end.
    await wait_for_timer(daemon, 10_000)
    await daemon.advance_async(10_000)
    resp = await cancel
    assert resp.outcome == turn_pb.CANCEL_OUTCOME_REFUSED
    assert resp.agent.lifecycle.WhichOneof("state") == "running"
    await daemon.advance_async(60_000)
    await wait_for_state(stubs, agent_id, "idle")
    page = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert page.rows[-1].item.assistant_message.text == "end"
