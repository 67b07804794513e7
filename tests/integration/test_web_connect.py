"""corral.v1 over the Connect protocol on the web port, through the wire against a real
daemon: unary calls in binary and JSON, and Subscribe streamed in both, receiving exactly the
events a gRPC client receives."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import timeline_pb2 as timeline_pb
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.web import (
    Stream,
    Web,
    WebError,
    grpc_synced,
    read_synced,
    stream_request,
    through_turn,
)

RAW, PROJECTED = timeline_pb.TIMELINE_VIEW_RAW, timeline_pb.TIMELINE_VIEW_PROJECTED


@pytest.fixture(scope="module")
def web_daemon() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0")).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def web(web_daemon: DaemonThread) -> AsyncIterator[Web]:
    assert web_daemon.daemon is not None
    base = f"http://127.0.0.1:{web_daemon.daemon.web_port}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield Web(client)


@pytest.fixture
async def stubs(web_daemon: DaemonThread) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(web_daemon.address) as channel:
        yield Stubs.of(channel)


@pytest.mark.parametrize("json_codec", [False, True], ids=["proto", "json"])
async def test_connect_unary_calls_create_prompt_and_fetch_like_grpc(
    web: Web, stubs: Stubs, tmp_path: Any, json_codec: bool
) -> None:
    created = await web.unary(
        "AgentService/CreateAgent",
        create_request(str(tmp_path), title="from the web"),
        agent_pb.CreateAgentResponse,
        json_codec=json_codec,
    )
    assert not isinstance(created, WebError), created
    agent_id = created.agent.id
    assert created.agent.title == "from the web"
    sent = await web.unary(
        "TurnService/SendPrompt",
        prompt_request(agent_id, "hello"),
        turn_pb.SendPromptResponse,
        json_codec=json_codec,
    )
    assert not isinstance(sent, WebError), sent
    assert sent.disposition == turn_pb.PROMPT_DISPOSITION_STARTED
    idle = await web.unary(
        "TurnService/WaitForIdle",
        turn_pb.WaitForIdleRequest(agent_id=agent_id),
        turn_pb.WaitForIdleResponse,
        json_codec=json_codec,
    )
    assert not isinstance(idle, WebError), idle
    fetched = await web.unary(
        "TimelineService/FetchTimeline",
        tl_pb.FetchTimelineRequest(agent_id=agent_id),
        tl_pb.FetchTimelineResponse,
        json_codec=json_codec,
    )
    assert not isinstance(fetched, WebError), fetched
    over_grpc = await stubs.timeline.FetchTimeline(tl_pb.FetchTimelineRequest(agent_id=agent_id))
    assert fetched == over_grpc
    kinds = [row.item.WhichOneof("kind") for row in fetched.rows]
    assert "user_message" in kinds and "assistant_message" in kinds
    got = await web.unary(
        "AgentService/GetAgent",
        agent_pb.GetAgentRequest(agent_id=agent_id),
        agent_pb.GetAgentResponse,
        json_codec=json_codec,
    )
    assert got == await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))


async def test_connect_unary_error_carries_the_grpc_code_message_and_error_info(
    web: Web, stubs: Stubs
) -> None:
    error = await web.unary(
        "AgentService/GetAgent",
        agent_pb.GetAgentRequest(agent_id="nope"),
        agent_pb.GetAgentResponse,
    )
    assert isinstance(error, WebError)
    with pytest.raises(grpc.aio.AioRpcError) as over_grpc:
        await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id="nope"))
    assert (error.code, error.message) == ("not_found", over_grpc.value.details())
    assert error.reason == "AGENT_NOT_FOUND"
    assert error.metadata == {"agent_id": "nope"}


async def _read_until(stream: Stream, turn_id: str) -> list[event_pb.Event]:
    events: list[event_pb.Event] = []
    while (through := through_turn(events, turn_id)) is None:
        message = await stream.read()
        assert message is not None, f"the stream ended early: {stream.end}"
        events.extend(message.events)
    return through


async def _grpc_until(call: Any, turn_id: str) -> list[event_pb.Event]:
    events: list[event_pb.Event] = []
    while (through := through_turn(events, turn_id)) is None:
        response = await call.read()
        assert response is not grpc.aio.EOF
        events.extend(response.events)
    return through


# PROJECTED too: the web port serves the same servicer, so a projected stream's re-encoded
# batches (docs/design.md#projections) must pass both codecs as the hub's do.
@pytest.mark.parametrize("view", [RAW, PROJECTED], ids=["raw", "projected"])
async def test_connect_subscribe_in_proto_and_json_gets_exactly_the_grpc_events(
    web: Web, stubs: Stubs, tmp_path: Any, view: timeline_pb.TimelineView.ValueType
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    request = event_pb.SubscribeRequest(agent_ids=[agent.id], view=view)
    grpc_call = stubs.events.Subscribe(request)
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for json_codec in (False, True):
            response = await stack.enter_async_context(
                web.http.stream(
                    **stream_request("EventService/Subscribe", request, json_codec=json_codec)
                )
            )
            assert response.status_code == 200
            kind = "json" if json_codec else "proto"
            assert response.headers["content-type"] == f"application/connect+{kind}"
            streams.append(Stream(response, event_pb.SubscribeResponse, json_codec))
        for stream in streams:  # subscribed before the turn: each sees it whole
            await read_synced(stream)
        await grpc_synced(grpc_call)
        started = await stubs.turns.SendPrompt(prompt_request(agent.id, "hello there"))
        over_grpc = await _grpc_until(grpc_call, started.turn_id)
        kinds = {e.WhichOneof("payload") for e in over_grpc}
        projected = "timeline_entry_upserted" in kinds and "timeline_row_appended" not in kinds
        assert projected is (view == PROJECTED)
        for stream in streams:
            assert await _read_until(stream, started.turn_id) == over_grpc
        grpc_call.cancel()
