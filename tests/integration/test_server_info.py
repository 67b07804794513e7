"""ServerService.GetServerInfo through the wire: a daemon says its version, the API, its event
log's incarnation and head, the limits it was configured with, its providers and features, and
whether it serves or drains; over gRPC and over Connect on the web port alike, behind tokens when
they are on. A standby answering it (and reflection) to grpcurl is in
test_server_info_standby.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import grpc
import httpx2 as httpx
import pytest
from grpc_health.v1 import health_pb2

from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import event_service_pb2_grpc as event_grpc
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral_cli.health import health_stub
from corral_server.manager.validate import Limits
from tests import conftest
from tests.support.client import Stubs, create_request, error_details
from tests.support.daemon import DaemonThread
from tests.support.web import Web, WebError

TOKEN = "server-info-token-0123456789"
TIMEOUT = 30.0
# Not the defaults: the answer must come from the daemon's configuration.
CONFIG = replace(
    conftest.test_config(),
    max_request_bytes=5 * 1024 * 1024,
    limits=Limits(max_prompt_chars=12_345, max_content_parts=77, max_ids=300),
    max_streams_per_connection=17,
    web_listen="127.0.0.1:0",
    metrics_listen="127.0.0.1:0",
)


@pytest.fixture(scope="module")
def served() -> Iterator[DaemonThread]:
    daemon = DaemonThread(CONFIG).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def info_stub(served: DaemonThread) -> AsyncIterator[server_grpc.ServerServiceAsyncStub]:
    async with grpc.aio.insecure_channel(served.address) as channel:
        yield server_grpc.ServerServiceStub(channel)


async def web_client(daemon: DaemonThread) -> httpx.AsyncClient:
    assert daemon.daemon is not None
    base = f"http://127.0.0.1:{daemon.daemon.web_port}"
    return httpx.AsyncClient(base_url=base, timeout=TIMEOUT)


async def synced_of(stream: AsyncIterator[event_pb.SubscribeResponse]) -> event_pb.Synced:
    async for response in stream:
        for event in response.events:
            if event.HasField("synced"):
                return event.synced
    raise AssertionError("the stream ended before synced")


async def test_it_says_its_version_api_limits_providers_and_features(
    served: DaemonThread, info_stub: server_grpc.ServerServiceAsyncStub
) -> None:
    info = await info_stub.GetServerInfo(server_pb.GetServerInfoRequest(), timeout=TIMEOUT)
    daemon = served.daemon
    assert daemon is not None and daemon.web is not None
    assert info.version == metadata.version("corral")
    assert info.api_version == "corral.v1"
    assert info.state == server_pb.SERVING_STATE_SERVING
    assert info.limits == server_pb.ServerLimits(
        max_request_bytes=5 * 1024 * 1024,
        max_prompt_chars=12_345,
        max_prompt_bytes=Limits().max_prompt_bytes,
        max_content_parts=77,
        max_ids_per_request=300,
        max_id_chars=256,
        max_labels=64,
        max_streams_per_connection=17,
    )
    assert "scripted" in info.providers
    assert info.features == server_pb.ServerFeatures(
        reflection=True,
        web=True,
        web_url=daemon.web.url,
        metrics=True,
        metrics_url=f"http://127.0.0.1:{daemon.metrics_port}/metrics",
    )


async def test_its_incarnation_and_head_are_those_subscribers_see(
    served: DaemonThread, info_stub: server_grpc.ServerServiceAsyncStub, tmp_path: Path
) -> None:
    async with grpc.aio.insecure_channel(served.address) as channel:
        stream = event_grpc.EventServiceStub(channel).Subscribe(event_pb.SubscribeRequest())
        synced = await synced_of(stream.__aiter__())
        before = await info_stub.GetServerInfo(server_pb.GetServerInfoRequest())
        assert before.incarnation == synced.incarnation != ""
        assert before.head_revision >= synced.revision
        await Stubs.of(channel).agents.CreateAgent(create_request(str(tmp_path)))
        after = await info_stub.GetServerInfo(server_pb.GetServerInfoRequest())
        assert after.head_revision > before.head_revision
        # The head is a revision the stream delivers.
        revisions: set[int] = set()
        async for response in stream:
            revisions.update(event.revision for event in response.events)
            if after.head_revision in revisions:
                break
        stream.cancel()


@pytest.mark.parametrize("json_codec", [False, True], ids=["proto", "json"])
async def test_connect_on_the_web_port_answers_as_grpc_does(
    served: DaemonThread, info_stub: server_grpc.ServerServiceAsyncStub, json_codec: bool
) -> None:
    async with await web_client(served) as client:
        answer = await Web(client).unary(
            "ServerService/GetServerInfo",
            server_pb.GetServerInfoRequest(),
            server_pb.GetServerInfoResponse,
            json_codec=json_codec,
        )
    assert isinstance(answer, server_pb.GetServerInfoResponse), answer
    over_grpc = await info_stub.GetServerInfo(server_pb.GetServerInfoRequest())
    assert answer.head_revision <= over_grpc.head_revision
    answer.head_revision = over_grpc.head_revision
    assert answer == over_grpc


async def test_a_draining_daemon_says_draining_while_it_still_answers(tmp_path: Path) -> None:
    daemon = DaemonThread(conftest.test_config()).start()
    try:
        assert daemon.daemon is not None
        # The delay runs on the FakeClock: the drain holds in it until skipped.
        drain = asyncio.run_coroutine_threadsafe(
            daemon.daemon.drain(grace_s=3.0, delay_s=60.0), daemon.loop
        )
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            health = health_stub(channel)
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while (await health.Check(health_pb2.HealthCheckRequest())).status == (
                health_pb2.HealthCheckResponse.SERVING
            ):
                assert asyncio.get_running_loop().time() < deadline, "the drain never began"
                await asyncio.sleep(0.01)
            info = await server_grpc.ServerServiceStub(channel).GetServerInfo(
                server_pb.GetServerInfoRequest(), timeout=TIMEOUT
            )
        assert info.state == server_pb.SERVING_STATE_DRAINING
        daemon.loop.call_soon_threadsafe(daemon.daemon.skip_drain_delay)
        await asyncio.wrap_future(drain)
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonThread]:
    tokens = tmp_path_factory.mktemp("server-info") / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    config = replace(conftest.test_config(), auth_token_file=tokens, web_listen="127.0.0.1:0")
    daemon = DaemonThread(config).start()
    yield daemon
    daemon.stop()


async def test_with_tokens_a_call_without_one_is_refused(secured: DaemonThread) -> None:
    async with grpc.aio.insecure_channel(secured.address) as channel:
        stub = server_grpc.ServerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetServerInfo(server_pb.GetServerInfoRequest(), timeout=TIMEOUT)
        details = error_details(refused.value)
        assert (details.code, details.reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")
        info = await stub.GetServerInfo(
            server_pb.GetServerInfoRequest(),
            metadata=(("authorization", f"Bearer {TOKEN}"),),
            timeout=TIMEOUT,
        )
    assert info.features.tokens and not info.features.tls
    async with await web_client(secured) as client:
        web = Web(client)
        request = (server_pb.GetServerInfoRequest(), server_pb.GetServerInfoResponse)
        refusal = await web.unary("ServerService/GetServerInfo", *request)
        assert isinstance(refusal, WebError)
        assert (refusal.code, refusal.reason) == ("unauthenticated", "TOKEN_MISSING")
        answer = await web.unary(
            "ServerService/GetServerInfo", *request, authorization=f"Bearer {TOKEN}"
        )
    assert isinstance(answer, server_pb.GetServerInfoResponse)
    assert answer.features.tokens
