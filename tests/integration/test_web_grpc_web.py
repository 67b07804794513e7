"""gRPC-Web on the web port, and errors in every web protocol, through the wire against a real
daemon: the same code, message, ErrorInfo and BadRequest as the gRPC edge gives."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details, next_message, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.web import (
    Stream,
    Web,
    WebError,
    envelope,
    frames,
    grpc_synced,
    read_synced,
    stream_request,
    through_turn,
)

# Connect's names, gRPC's numbers, of the codes these tests meet.
CODES = {"invalid_argument": 3, "not_found": 5}


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
async def test_grpc_web_unary_answers_one_message_and_ok_trailers(
    web: Web, stubs: Stubs, tmp_path: Any, json_codec: bool
) -> None:
    messages, status = await web.grpc_web(
        "AgentService/CreateAgent",
        create_request(str(tmp_path), title="grpc-web"),
        agent_pb.CreateAgentResponse,
        json_codec=json_codec,
    )
    assert status.code == "0" and len(messages) == 1
    agent_id = messages[0].agent.id
    over_grpc = await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id))
    assert over_grpc.agent.title == "grpc-web"


async def test_grpc_web_text_is_base64_both_ways(web: Web, tmp_path: Any) -> None:
    request = create_request(str(tmp_path), title="text").SerializeToString()
    answer = await web.http.post(
        "/corral.v1.AgentService/CreateAgent",
        content=base64.b64encode(envelope(request)),
        headers={"content-type": "application/grpc-web-text", "x-grpc-web": "1"},
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/grpc-web-text+proto"
    decoded = b"".join(base64.b64decode(c) for c in _padded_chunks(answer.content))
    (flags, message), (trailer_flags, trailers) = frames(decoded)
    assert (flags, trailer_flags) == (0, 0x80)
    assert agent_pb.CreateAgentResponse.FromString(message).agent.title == "text"
    assert b"grpc-status:0" in trailers


def _padded_chunks(data: bytes) -> list[bytes]:
    """Base64 segments, each ending at its padding (writes are encoded one by one)."""
    chunks, start = [], 0
    for index in range(0, len(data), 4):
        if data[index : index + 4].endswith(b"=") or index + 4 >= len(data):
            chunks.append(data[start : index + 4])
            start = index + 4
    return chunks


async def test_grpc_web_subscribe_streams_the_grpc_events_then_ok_trailers(
    web: Web, stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    request = event_pb.SubscribeRequest(agent_ids=[agent.id])
    grpc_call = stubs.events.Subscribe(request)
    async with web.http.stream(
        **stream_request("EventService/Subscribe", request, protocol="grpc-web")
    ) as response:
        assert response.headers["content-type"] == "application/grpc-web+proto"
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        await read_synced(stream)
        await grpc_synced(grpc_call)
        started = await stubs.turns.SendPrompt(prompt_request(agent.id, "hi"))
        web_events: list[event_pb.Event] = []
        grpc_events: list[event_pb.Event] = []
        while through_turn(grpc_events, started.turn_id) is None:
            grpc_events.extend((await next_message(grpc_call)).events)
        while through_turn(web_events, started.turn_id) is None:
            web_events.extend((await stream.read()).events)
        over_grpc = through_turn(grpc_events, started.turn_id)
        assert through_turn(web_events, started.turn_id) == over_grpc
        assert over_grpc is not None and any(e.HasField("timeline_row_appended") for e in over_grpc)
    grpc_call.cancel()


async def test_grpc_web_stream_turn_ends_with_ok_trailers(
    web: Web, stubs: Stubs, tmp_path: Any
) -> None:
    agent = (await stubs.agents.CreateAgent(create_request(str(tmp_path)))).agent
    request = turn_pb.StreamTurnRequest(
        agent_id=agent.id, content=prompt_request(agent.id, "x").content
    )
    async with web.http.stream(
        **stream_request("TurnService/StreamTurn", request, protocol="grpc-web")
    ) as response:
        stream = Stream(response, turn_pb.StreamTurnResponse, json_codec=False)
        messages = []
        while (message := await stream.read()) is not None:
            messages.append(message)
        assert stream.error() is None and messages


def _bad_create() -> agent_pb.CreateAgentRequest:
    return agent_pb.CreateAgentRequest(provider="scripted", cwd="relative/path")


@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
@pytest.mark.parametrize("json_codec", [False, True], ids=["proto", "json"])
async def test_invalid_argument_carries_the_same_error_info_and_bad_request(
    web: Web, stubs: Stubs, protocol: str, json_codec: bool
) -> None:
    request = _bad_create()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stubs.agents.CreateAgent(request)
    expected = error_details(caught.value)
    assert expected.code == grpc.StatusCode.INVALID_ARGUMENT and expected.fields
    error: WebError
    if protocol == "connect":
        answer = await web.unary(
            "AgentService/CreateAgent", request, agent_pb.CreateAgentResponse, json_codec=json_codec
        )
        assert isinstance(answer, WebError)
        error = answer
        assert error.code == "invalid_argument"
    else:
        messages, error = await web.grpc_web(
            "AgentService/CreateAgent", request, agent_pb.CreateAgentResponse, json_codec=json_codec
        )
        assert not messages and error.code == str(CODES["invalid_argument"])
    assert (error.message, error.reason, error.fields) == (
        expected.message,
        expected.reason,
        expected.fields,
    )


@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
async def test_a_stream_error_ends_the_stream_with_the_grpc_status(
    web: Web, stubs: Stubs, protocol: str
) -> None:
    request = event_pb.SubscribeRequest(agent_ids=["a", "a"])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stubs.events.Subscribe(request).read()
    expected = error_details(caught.value)
    async with web.http.stream(
        **stream_request("EventService/Subscribe", request, protocol=protocol)
    ) as response:
        assert response.status_code == 200
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        assert await stream.read() is None
    error = stream.error()
    assert error is not None
    assert error.code in ("invalid_argument", "3")
    assert (error.message, error.reason, error.fields) == (
        expected.message,
        expected.reason,
        expected.fields,
    )
