"""The single writer through the wire (docs/design.md#durability): StreamTurn follows the hub,
provider calls have deadlines, a request that fails changes nothing, a canceled turn leaves a trace,
and text that cannot be encoded never leaves an agent stuck in running."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from corral.v1 import agent_service_pb2 as agent_svc_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.domain.timeline import AssistantMessage
from corral_server.manager.specs import Timeouts
from corral_server.providers.base import ProviderItem, ProviderTurnCompleted
from tests.support.client import (
    Stubs,
    create_request,
    error_details,
    next_message,
    prompt_request,
    text,
)
from tests.support.daemon import DaemonThread
from tests.support.fakes import FakeProvider

TIMEOUTS = Timeouts(interrupt_s=5.0, settle_s=10.0, start_turn_s=30.0)


@pytest.fixture(scope="module")
def fake() -> FakeProvider:
    return FakeProvider("fake")


@pytest.fixture(scope="module")
def fake_daemon(fake: FakeProvider) -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(timeouts=TIMEOUTS, extra_providers={"fake": fake})).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def stubs(fake_daemon: DaemonThread) -> Any:
    async with grpc.aio.insecure_channel(fake_daemon.address) as channel:
        yield Stubs.of(channel)


async def fake_agent(stubs: Stubs, cwd: Any) -> str:
    reply = await stubs.agents.CreateAgent(create_request(str(cwd), provider="fake"))
    return reply.agent.id


async def timeline(stubs: Stubs, agent_id: str) -> list[Any]:
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id, limit=0)
    )
    return list(page.rows)


async def test_stream_turn_carries_the_rows_a_provider_reports_without_a_turn_id(
    stubs: Stubs, fake: FakeProvider, fake_daemon: DaemonThread, tmp_path: Any
) -> None:
    agent_id = await fake_agent(stubs, tmp_path)
    session = fake.session
    call = stubs.turns.StreamTurn(turn_pb.StreamTurnRequest(agent_id=agent_id, content=text("go")))
    first = await next_message(call)
    assert first.WhichOneof("event") == "turn_started"
    turn_id = first.turn_started.turn_id
    fake_daemon.loop.call_soon_threadsafe(
        session.emit,
        ProviderItem("", AssistantMessage("said without an id", "m1"), "m1"),
        ProviderTurnCompleted(turn_id),
    )
    rest = []
    while isinstance(event := await call.read(), turn_pb.StreamTurnResponse):
        rest.append(event)
    kinds = [e.WhichOneof("event") for e in rest]
    assert kinds == ["row", "row", "turn_completed"]
    assert rest[1].row.item.assistant_message.text == "said without an id"
    assert rest[1].row.turn_id == turn_id
    # Subscribe saw the very same rows.
    assert [r.seq for r in await timeline(stubs, agent_id)] == [r.row.seq for r in rest[:2]]


async def test_a_start_turn_that_hangs_answers_deadline_exceeded_and_errors_the_agent(
    stubs: Stubs, fake: FakeProvider, fake_daemon: DaemonThread, tmp_path: Any
) -> None:
    agent_id = await fake_agent(stubs, tmp_path)
    session = fake.session
    fake_daemon.run(_hold_start(session))
    sending = asyncio.ensure_future(stubs.turns.SendPrompt(prompt_request(agent_id, "hello")))
    await asyncio.to_thread(fake_daemon.clock.wait_for_timer, round(TIMEOUTS.start_turn_s * 1000))
    await fake_daemon.advance_async(round(TIMEOUTS.start_turn_s * 1000))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await sending
    details = error_details(raised.value)
    assert (details.code, details.reason) == (grpc.StatusCode.DEADLINE_EXCEEDED, "PROVIDER_TIMEOUT")
    agent = (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.WhichOneof("state") == "errored"
    assert agent.lifecycle.errored.error.code == "PROVIDER_TIMEOUT"


async def _hold_start(session: Any) -> None:
    session.hold_start()  # never released


async def test_clear_attention_that_fails_for_one_agent_changes_none(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    finished = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await _run(stubs, finished, "hello")
    closed = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await stubs.agents.CloseAgent(agent_svc_pb.CloseAgentRequest(agent_id=closed))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stubs.agents.ClearAttention(
            agent_svc_pb.ClearAttentionRequest(agent_ids=[finished, closed])
        )
    assert error_details(raised.value).reason == "AGENT_CLOSED"
    agent = (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=finished))).agent
    assert agent.attention.required  # untouched


async def _run(stubs: Stubs, agent_id: str, *lines: str) -> list[turn_pb.StreamTurnResponse]:
    call = stubs.turns.StreamTurn(
        turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    )
    return [event async for event in call]


async def test_a_canceled_turn_leaves_a_row_that_says_so(
    aio_channel: grpc.aio.Channel, daemon: DaemonThread, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    await stubs.turns.SendPrompt(prompt_request(agent_id, "/sleep 60000", "/reply late"))
    await asyncio.to_thread(daemon.clock.wait_for_timer, 60_000)
    reply = await stubs.turns.CancelTurn(turn_pb.CancelTurnRequest(agent_id=agent_id))
    assert reply.outcome == turn_pb.CANCEL_OUTCOME_SETTLED
    last = (await timeline(stubs, agent_id))[-1]
    assert last.item.error.code == "TURN_CANCELED"
    assert last.item.error.message == "turn canceled: interrupted"


async def test_a_lone_surrogate_in_tool_input_never_leaves_the_agent_running(
    aio_channel: grpc.aio.Channel, tmp_path: Any
) -> None:
    stubs = Stubs.of(aio_channel)
    agent_id = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent.id
    events = await _run(stubs, agent_id, '/tool t {"a":"\\ud800"}')
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "turn_completed"
    rows = [e.row for e in events if e.WhichOneof("event") == "row"]
    tool = [r.item.tool_call for r in rows if r.item.HasField("tool_call")][-1]
    assert tool.input.struct_value.fields["a"].string_value == "\ufffd"  # mended, not dropped
    rows = await timeline(stubs, agent_id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    agent = (await stubs.agents.GetAgent(agent_svc_pb.GetAgentRequest(agent_id=agent_id))).agent
    assert agent.lifecycle.WhichOneof("state") == "idle"
