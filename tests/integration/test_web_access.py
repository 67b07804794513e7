"""Who may call the web port, through the wire: bearer tokens like gRPC's, pages of other
origins refused unless allowed (and their CORS preflights), loopback host names only on a
loopback port, TLS with the gRPC certificate flags, and the caps on open web calls."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral_server.app import Config
from corral_server.rpc.tls import TlsFiles
from corral_server.web.calls import token_digest
from tests.support.daemon import DaemonThread
from tests.support.tls import issue, make_authority
from tests.support.web import Stream, Web, WebError, no_open_calls, read_synced, stream_request

TOKEN = "web-token-0123456789"
ALLOWED = "https://app.example.com"
LIST = "AgentService/ListAgents"


def web_url(daemon: DaemonThread, scheme: str = "http") -> str:
    assert daemon.daemon is not None
    return f"{scheme}://127.0.0.1:{daemon.daemon.web_port}"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonThread]:
    tokens = tmp_path_factory.mktemp("web-tokens") / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    tokens.chmod(0o600)
    config = Config(
        web_listen="127.0.0.1:0",
        auth_token_file=tokens,
        web_allow_origins=(ALLOWED,),
        web_max_calls_per_client=3,
    )
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def web(guarded: DaemonThread) -> AsyncIterator[Web]:
    async with httpx.AsyncClient(base_url=web_url(guarded), timeout=30) as client:
        yield Web(client)


AUTHORIZATION = f"Bearer {TOKEN}"
BEARER = {"authorization": AUTHORIZATION}


async def test_a_call_without_a_token_is_unauthenticated_token_missing(web: Web) -> None:
    error = await web.unary(LIST, agent_pb.ListAgentsRequest(), agent_pb.ListAgentsResponse)
    assert isinstance(error, WebError)
    assert (error.code, error.reason) == ("unauthenticated", "TOKEN_MISSING")


async def test_a_wrong_token_is_refused_in_both_protocols(web: Web) -> None:
    wrong = "Bearer not-the-token"
    error = await web.unary(
        LIST, agent_pb.ListAgentsRequest(), agent_pb.ListAgentsResponse, authorization=wrong
    )
    assert isinstance(error, WebError) and error.reason == "TOKEN_INVALID"
    messages, status = await web.grpc_web(
        LIST, agent_pb.ListAgentsRequest(), agent_pb.ListAgentsResponse, authorization=wrong
    )
    assert not messages and (status.code, status.reason) == ("16", "TOKEN_INVALID")


async def test_the_token_lets_a_call_through(web: Web) -> None:
    answer = await web.unary(
        LIST, agent_pb.ListAgentsRequest(), agent_pb.ListAgentsResponse, authorization=AUTHORIZATION
    )
    assert isinstance(answer, agent_pb.ListAgentsResponse)


async def test_an_open_stream_records_the_digest_of_its_token_only(
    web: Web, guarded: DaemonThread
) -> None:
    assert guarded.daemon is not None and guarded.daemon.web is not None
    calls = guarded.daemon.web.calls
    await no_open_calls(guarded)
    arguments = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
    arguments["headers"].update(BEARER)
    async with web.http.stream(**arguments) as response:
        stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
        await read_synced(stream)
        digests = [call.token_digest for call in calls._open.values()]
        assert digests == [token_digest(TOKEN.encode())]
        cut = guarded.run(_cut_all(guarded))
        assert cut == 1
        assert await stream.read() is None  # cut: the stream ends in-band
    error = stream.error()
    assert error is not None and error.code == "unauthenticated"


async def _cut_all(daemon: DaemonThread) -> int:
    assert daemon.daemon is not None and daemon.daemon.web is not None
    return daemon.daemon.web.calls.cut(lambda digest: False)


async def test_the_streams_of_one_client_are_capped(web: Web, guarded: DaemonThread) -> None:
    await no_open_calls(guarded)
    arguments = stream_request("EventService/Subscribe", event_pb.SubscribeRequest())
    arguments["headers"].update(BEARER)
    async with contextlib.AsyncExitStack() as stack:
        held = []  # a Stream dropped would close its response
        for _ in range(3):
            response = await stack.enter_async_context(web.http.stream(**arguments))
            held.append(Stream(response, event_pb.SubscribeResponse, json_codec=False))
            await read_synced(held[-1])
        async with web.http.stream(**arguments) as response:
            refused = Stream(response, event_pb.SubscribeResponse, json_codec=False)
            assert await refused.read() is None
        error = refused.error()
        assert error is not None
        assert (error.code, error.reason) == ("resource_exhausted", "TOO_MANY_WEB_CALLS")
    # Closed streams free their places (the server notices the hang-ups).
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        answer = await web.unary(
            LIST,
            agent_pb.ListAgentsRequest(),
            agent_pb.ListAgentsResponse,
            authorization=AUTHORIZATION,
        )
        if isinstance(answer, agent_pb.ListAgentsResponse):
            break
        assert asyncio.get_running_loop().time() < deadline, answer
        await asyncio.sleep(0.02)


async def test_static_files_need_no_token(web: Web) -> None:
    assert (await web.http.get("/")).status_code == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:1"])
async def test_a_page_of_another_origin_is_refused_before_anything_runs(
    web: Web, guarded: DaemonThread, origin: str, tmp_path: Any
) -> None:
    from tests.support.client import create_request

    answer = await web.http.post(
        "/corral.v1.AgentService/CreateAgent",
        content=create_request(str(tmp_path)).SerializeToString(),
        headers={"content-type": "application/proto", "origin": origin, **BEARER},
    )
    assert answer.status_code == 403 and "cross-origin" in answer.text
    listed = await web.unary(
        LIST, agent_pb.ListAgentsRequest(), agent_pb.ListAgentsResponse, authorization=AUTHORIZATION
    )
    assert isinstance(listed, agent_pb.ListAgentsResponse) and not listed.agents


async def test_the_page_s_own_origin_is_served(web: Web, guarded: DaemonThread) -> None:
    answer = await web.unary(
        LIST,
        agent_pb.ListAgentsRequest(),
        agent_pb.ListAgentsResponse,
        origin=web_url(guarded),
        authorization=AUTHORIZATION,
    )
    assert isinstance(answer, agent_pb.ListAgentsResponse)


async def test_an_allowed_origin_is_served_with_cors_headers(web: Web) -> None:
    answer = await web.http.post(
        f"/corral.v1.{LIST}",
        content=b"",
        headers={"content-type": "application/proto", "origin": ALLOWED, **BEARER},
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ALLOWED
    assert "grpc-status-details-bin" in answer.headers["access-control-expose-headers"]


async def test_a_preflight_of_an_allowed_origin_names_the_headers_clients_send(web: Web) -> None:
    answer = await web.http.request(
        "OPTIONS",
        f"/corral.v1.{LIST}",
        headers={
            "origin": ALLOWED,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type,connect-protocol-version,authorization",
        },
    )
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == ALLOWED
    allowed = {h.strip() for h in answer.headers["access-control-allow-headers"].split(",")}
    assert {
        "content-type",
        "connect-protocol-version",
        "connect-timeout-ms",
        "authorization",
    } <= allowed
    assert {"x-grpc-web", "x-user-agent", "grpc-timeout"} <= allowed
    assert "POST" in answer.headers["access-control-allow-methods"]


async def test_a_preflight_of_another_origin_is_refused(web: Web) -> None:
    answer = await web.http.request(
        "OPTIONS",
        f"/corral.v1.{LIST}",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert answer.status_code == 403
    assert "access-control-allow-origin" not in answer.headers


async def test_a_foreign_host_name_on_a_loopback_port_is_refused(web: Web) -> None:
    # A page of evil.example whose name resolves to 127.0.0.1 is "same-origin" with itself.
    rebound = {"host": "evil.example:50052", "origin": "http://evil.example:50052", **BEARER}
    answer = await web.http.post(
        f"/corral.v1.{LIST}", content=b"", headers={"content-type": "application/proto", **rebound}
    )
    assert answer.status_code == 403
    assert (await web.http.get("/", headers={"host": "evil.example"})).status_code == 403
    localhost = await web.http.get("/", headers={"host": "localhost:1234"})
    assert localhost.status_code == 200


def test_the_web_port_speaks_tls_with_the_grpc_certificate(tmp_path: Path) -> None:
    ca = make_authority(tmp_path, "web-ca")
    server = issue(ca, tmp_path, "web-daemon", server=True)
    config = Config(web_listen="127.0.0.1:0", tls=TlsFiles(server.cert, server.key))
    daemon = DaemonThread(config).start()
    try:
        trusted = ssl.create_default_context(cafile=str(ca.cert))
        with httpx.Client(base_url=web_url(daemon, "https"), verify=trusted, timeout=30) as client:
            answer = client.post(
                f"/corral.v1.{LIST}", content=b"", headers={"content-type": "application/proto"}
            )
            assert answer.status_code == 200
            assert (
                agent_pb.ListAgentsResponse.FromString(answer.content)
                == agent_pb.ListAgentsResponse()
            )
        plain = httpx.Client(base_url=web_url(daemon, "http"), timeout=5)
        with plain, pytest.raises(httpx.HTTPError):
            plain.get("/")
    finally:
        daemon.stop()


def test_mutual_tls_on_the_web_port_needs_a_client_certificate_of_the_authority(
    tmp_path: Path,
) -> None:
    ca = make_authority(tmp_path, "web-ca")
    server = issue(ca, tmp_path, "web-daemon", server=True)
    client = issue(ca, tmp_path, "web-alice", server=False)
    config = Config(web_listen="127.0.0.1:0", tls=TlsFiles(server.cert, server.key, ca.cert))
    daemon = DaemonThread(config).start()
    try:
        with_cert = ssl.create_default_context(cafile=str(ca.cert))
        with_cert.load_cert_chain(str(client.cert), str(client.key))
        url = web_url(daemon, "https")
        with httpx.Client(base_url=url, verify=with_cert, timeout=30) as http:
            assert http.get("/").status_code == 200
        without = ssl.create_default_context(cafile=str(ca.cert))
        anonymous = httpx.Client(base_url=url, verify=without, timeout=30)
        with anonymous, pytest.raises(httpx.HTTPError):
            anonymous.get("/")
    finally:
        daemon.stop()
