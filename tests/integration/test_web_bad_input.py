"""Bad input on the web port gets a clear status and changes no state: bodies past the
request limit, bodies that do not decode, bad envelopes, wrong content types, unknown
methods, bad protocol headers and deadlines."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_server.app import Config
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread
from tests.support.web import (
    Stream,
    WebError,
    connect_error,
    envelope,
    no_open_calls,
    stream_request,
)

LIMIT = 4096
CREATE = "/corral.v1.AgentService/CreateAgent"
PROTO = {"content-type": "application/proto"}


@pytest.fixture(scope="module")
def web_daemon() -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0", max_request_bytes=LIMIT)).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def http(web_daemon: DaemonThread) -> AsyncIterator[httpx.AsyncClient]:
    assert web_daemon.daemon is not None
    base = f"http://127.0.0.1:{web_daemon.daemon.web_port}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client


@pytest.fixture
async def stubs(web_daemon: DaemonThread) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(web_daemon.address) as channel:
        yield Stubs.of(channel)


@pytest.fixture
async def unchanged(stubs: Stubs) -> AsyncIterator[None]:
    """Asserts after the test that no agent was created or changed."""
    before = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest())
    yield
    assert await stubs.agents.ListAgents(agent_pb.ListAgentsRequest()) == before


def _error(answer: httpx.Response, status: int) -> WebError:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    return connect_error(answer.json())


def _big_create(tmp_path: Any) -> bytes:
    return create_request(str(tmp_path), title="x" * (2 * LIMIT)).SerializeToString()


async def test_a_body_past_the_limit_is_refused_as_resource_exhausted(
    http: httpx.AsyncClient, tmp_path: Any, unchanged: None
) -> None:
    error = _error(await http.post(CREATE, content=_big_create(tmp_path), headers=PROTO), 429)
    assert (error.code, error.reason) == ("resource_exhausted", "REQUEST_TOO_LARGE")
    assert error.metadata == {"limit_bytes": str(LIMIT)}


async def test_a_chunked_body_past_the_limit_is_refused_while_it_arrives(
    http: httpx.AsyncClient, tmp_path: Any, unchanged: None
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        body = _big_create(tmp_path)
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    answer = await http.post(CREATE, content=chunks(), headers=PROTO)
    assert _error(answer, 429).reason == "REQUEST_TOO_LARGE"


async def test_an_undecodable_body_is_malformed_request_with_the_grpc_message(
    http: httpx.AsyncClient, web_daemon: DaemonThread, unchanged: None
) -> None:
    garbage = b"\xff\xff\xff"
    async with grpc.aio.insecure_channel(web_daemon.address) as channel:
        raw: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
        raw = channel.unary_unary("/corral.v1.AgentService/CreateAgent")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(garbage)
    expected = error_details(caught.value)
    error = _error(await http.post(CREATE, content=garbage, headers=PROTO), 400)
    assert (error.code, error.reason) == ("invalid_argument", "MALFORMED_REQUEST")
    assert (error.message, error.fields) == (expected.message, expected.fields)


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"cwd": 5}', b"\xff"])
async def test_json_that_is_not_the_request_is_malformed_request(
    http: httpx.AsyncClient, body: bytes, unchanged: None
) -> None:
    answer = await http.post(CREATE, content=body, headers={"content-type": "application/json"})
    error = _error(answer, 400)
    assert (error.code, error.reason) == ("invalid_argument", "MALFORMED_REQUEST")
    assert "corral.v1.AgentService/CreateAgent" in error.message


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x00",
        envelope(b"\x0a\x00")[:-1],
        envelope(b"") + envelope(b""),
        b"\x01\x00\x00\x00\x00",
    ],
    ids=["empty", "short-prefix", "short-payload", "two-messages", "compressed"],
)
@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
async def test_a_bad_envelope_ends_the_stream_as_malformed_request(
    http: httpx.AsyncClient, body: bytes, protocol: str
) -> None:
    arguments = stream_request(
        "EventService/Subscribe", event_pb.SubscribeRequest(), protocol=protocol
    )
    arguments["content"] = body
    async with http.stream(**arguments) as response:
        assert response.status_code == 200
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        assert await stream.read() is None
    error = stream.error()
    assert error is not None and error.reason == "MALFORMED_REQUEST"


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        (CREATE, "text/plain"),
        (CREATE, ""),
        (CREATE, "application/connect+proto"),  # a streaming protocol for a unary method
        ("/corral.v1.EventService/Subscribe", "application/proto"),  # and the reverse
    ],
)
async def test_a_content_type_the_method_cannot_take_is_415(
    http: httpx.AsyncClient, path: str, content_type: str, unchanged: None
) -> None:
    answer = await http.post(path, content=b"", headers={"content-type": content_type})
    assert answer.status_code == 415
    assert "application/proto" in answer.headers["accept-post"]


async def test_an_unknown_method_is_unimplemented_in_both_protocols(
    http: httpx.AsyncClient,
) -> None:
    answer = await http.post("/corral.v1.AgentService/Nope", content=b"", headers=PROTO)
    error = _error(answer, 404)
    assert error.code == "unimplemented" and "corral.v1.AgentService/Nope" in error.message
    grpc_web = await http.post(
        "/corral.v1.NoService/Nope",
        content=envelope(b""),
        headers={"content-type": "application/grpc-web+proto"},
    )
    assert grpc_web.status_code == 200
    assert b"grpc-status:12\r\n" in grpc_web.content


async def test_a_get_of_a_method_is_405(http: httpx.AsyncClient) -> None:
    answer = await http.get("/corral.v1.AgentService/ListAgents")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("connect-protocol-version", "2"),
        ("connect-timeout-ms", "soon"),
        ("connect-timeout-ms", "12345678901"),
    ],
)
async def test_bad_connect_headers_are_invalid_argument(
    http: httpx.AsyncClient, header: str, value: str, tmp_path: Any, unchanged: None
) -> None:
    body = create_request(str(tmp_path)).SerializeToString()
    answer = await http.post(CREATE, content=body, headers={**PROTO, header: value})
    assert _error(answer, 400).code == "invalid_argument"


@pytest.mark.parametrize("protocol", ["connect", "grpc-web"])
async def test_a_stream_past_its_deadline_ends_with_deadline_exceeded(
    http: httpx.AsyncClient, protocol: str
) -> None:
    arguments = stream_request(
        "EventService/Subscribe", event_pb.SubscribeRequest(), protocol=protocol
    )
    timeout = {"connect-timeout-ms": "50"} if protocol == "connect" else {"grpc-timeout": "50m"}
    arguments["headers"].update(timeout)
    async with http.stream(**arguments) as response:
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        while await stream.read() is not None:
            pass
    error = stream.error()
    assert error is not None and error.code in ("deadline_exceeded", "4")


async def test_a_compressed_request_is_unimplemented_and_not_decoded(
    http: httpx.AsyncClient, tmp_path: Any, unchanged: None
) -> None:
    body = create_request(str(tmp_path)).SerializeToString()
    answer = await http.post(CREATE, content=body, headers={**PROTO, "content-encoding": "gzip"})
    error = _error(answer, 501)
    assert error.code == "unimplemented" and "identity" in error.message
    arguments = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
    arguments["headers"]["connect-content-encoding"] = "gzip"
    async with http.stream(**arguments) as response:
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        assert await stream.read() is None
    refused = stream.error()
    assert refused is not None and refused.code == "unimplemented"


async def test_a_body_that_stops_arriving_is_refused_and_frees_its_slot(
    http: httpx.AsyncClient, web_daemon: DaemonThread, tmp_path: Any, unchanged: None
) -> None:
    assert web_daemon.daemon is not None and web_daemon.daemon.web is not None
    app = web_daemon.daemon.web.app
    app.body_timeout_s = 0.2  # wall clock: the body is network input, not daemon time
    try:
        body = create_request(str(tmp_path)).SerializeToString()
        host, port = "127.0.0.1", web_daemon.daemon.web_port
        reader, writer = await asyncio.open_connection(host, port)
        head = (
            f"POST {CREATE} HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/proto\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body[:1])  # and then nothing more
        head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        found = re.search(rb"content-length: (\d+)", head_bytes)
        assert found is not None, head_bytes
        length = int(found.group(1))
        answer = await asyncio.wait_for(reader.readexactly(length), 10)
        writer.close()
        assert head_bytes.startswith(b"HTTP/1.1 504 ") and b"deadline_exceeded" in answer
        await no_open_calls(web_daemon)  # its slot is free again
    finally:
        app.body_timeout_s = 30.0
