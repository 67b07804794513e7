"""Read-only tokens through the wire: a token marked `read` in the token file may list, get,
fetch (tool outputs too), subscribe, search, export, see changes and schedules and send
heartbeats, and every other method answers
PERMISSION_DENIED / READ_ONLY_TOKEN before its request is read, on gRPC and on the web port
alike, changing nothing; GetServerInfo tells a client its role; a bare token stays `full`; a
reload that makes a token read-only ends its open calls; the CLI with a read token watches but
cannot steer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx2 as httpx
import pytest

from corral.v1 import agent_service_pb2 as agent_pb
from corral.v1 import event_service_pb2 as event_pb
from corral.v1 import schedule_service_pb2 as schedule_pb
from corral.v1 import schedule_service_pb2_grpc as schedule_grpc
from corral.v1 import server_service_pb2 as server_pb
from corral.v1 import server_service_pb2_grpc as server_grpc
from corral.v1 import timeline_service_pb2 as tl_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral.v1 import workspace_service_pb2 as workspace_pb
from corral.v1 import workspace_service_pb2_grpc as workspace_grpc
from corral_cli.main import main
from corral_server.app import SERVICE_NAMES, Config
from corral_server.rpc.roles import READ_METHODS
from tests.integration.test_hostile_input import RAW_PATHS
from tests.support.client import Stubs, create_request, error_details, text
from tests.support.daemon import DaemonThread
from tests.support.web import Stream, Web, WebError, stream_request

FULL, READER = "full-token-0123456789", "reader-token-abcdefgh"
Capture = pytest.CaptureFixture[str]


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("roles") / "tokens"
    path.write_text(f"# a bare token is full\n{FULL}\n{READER} read\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def secured(token_file: Path) -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(auth_token_file=token_file, web_listen="127.0.0.1:0")).start()
    yield daemon
    daemon.stop()


@pytest.fixture
async def both(secured: DaemonThread, tmp_path: Path) -> AsyncIterator[tuple[Stubs, str]]:
    """Stubs and an agent with a finished turn, made with the full token."""
    async with grpc.aio.insecure_channel(secured.address) as channel:
        stubs = Stubs.of(channel)
        created = await stubs.agents.CreateAgent(
            create_request(str(tmp_path), initial_prompt=text("/reply hello")),
            metadata=bearer(FULL),
        )
        await stubs.turns.WaitForIdle(
            turn_pb.WaitForIdleRequest(agent_id=created.agent.id), metadata=bearer(FULL)
        )
        yield stubs, created.agent.id


def test_every_read_method_is_a_corral_method() -> None:
    declared = {path for path, _ in RAW_PATHS}
    assert declared >= READ_METHODS
    assert {path.split("/")[1] for path in READ_METHODS} <= set(SERVICE_NAMES)


async def test_a_read_token_reads_everything_and_changes_nothing(
    both: tuple[Stubs, str], secured: DaemonThread
) -> None:
    stubs, agent_id = both
    read = bearer(READER)
    listed = await stubs.agents.ListAgents(agent_pb.ListAgentsRequest(), metadata=read)
    assert agent_id in [a.id for a in listed.agents]
    before = await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id), metadata=read)
    page = await stubs.timeline.FetchTimeline(
        tl_pb.FetchTimelineRequest(agent_id=agent_id), metadata=read
    )
    assert len(page.rows) == 2
    export = stubs.agents.ExportAgent(agent_pb.ExportAgentRequest(agent_id=agent_id), metadata=read)
    assert b"hello" in b"".join([c.data async for c in export])
    await stubs.agents.GetUsage(agent_pb.GetUsageRequest(), metadata=read)
    await stubs.events.Heartbeat(event_pb.HeartbeatRequest(client_id="phone"), metadata=read)
    watch = stubs.events.Subscribe(event_pb.SubscribeRequest(agent_ids=[agent_id]), metadata=read)
    first = await watch.read()
    assert isinstance(first, event_pb.SubscribeResponse)
    assert any(e.HasField("agent_upserted") for e in first.events)
    watch.cancel()
    with pytest.raises(grpc.aio.AioRpcError) as searched:  # no state directory: not a refusal
        await stubs.timeline.SearchTimeline(tl_pb.SearchTimelineRequest(query="x"), metadata=read)
    assert searched.value.code() is grpc.StatusCode.UNIMPLEMENTED
    info = server_pb.GetServerInfoRequest()
    with grpc.insecure_channel(secured.address) as channel:
        describe = server_grpc.ServerServiceStub(channel).GetServerInfo
        assert describe(info, metadata=read).caller_role == "read"
        assert describe(info, metadata=bearer(FULL)).caller_role == "full"

    writes: list[tuple[Any, Any]] = [
        (stubs.turns.SendPrompt, turn_pb.SendPromptRequest(agent_id=agent_id, content=text("hi"))),
        (stubs.turns.CancelTurn, turn_pb.CancelTurnRequest(agent_id=agent_id)),
        (stubs.agents.CloseAgent, agent_pb.CloseAgentRequest(agent_id=agent_id)),
        (stubs.agents.ClearAttention, agent_pb.ClearAttentionRequest(agent_ids=[agent_id])),
        (stubs.agents.CreateAgent, create_request("/")),
    ]
    for call, request in writes:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(request, metadata=read)
        details = error_details(refused.value)
        assert (details.code, details.reason) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "READ_ONLY_TOKEN",
        )
    after = await stubs.agents.GetAgent(agent_pb.GetAgentRequest(agent_id=agent_id), metadata=read)
    assert after == before


async def test_a_read_token_pages_tool_outputs_lists_schedules_and_sees_changes(
    both: tuple[Stubs, str], secured: DaemonThread
) -> None:
    """What the dashboard reads for a watcher: a tool output's pages, the schedules and the
    working tree's changes are reads, not refused (each answers as it would a full token)."""
    stubs, agent_id = both
    answers = {}
    for token in (FULL, READER):
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            request = tl_pb.FetchToolOutputRequest(agent_id=agent_id, blob_id="no-such-output")
            await stubs.timeline.FetchToolOutput(request, metadata=bearer(token))
        async with grpc.aio.insecure_channel(secured.address) as channel:
            schedules = schedule_grpc.ScheduleServiceStub(channel)
            listed = await schedules.ListSchedules(
                schedule_pb.ListSchedulesRequest(agent_id=agent_id), metadata=bearer(token)
            )
            with pytest.raises(grpc.aio.AioRpcError) as changes:  # its cwd is no git tree
                await workspace_grpc.WorkspaceServiceStub(channel).GetChanges(
                    workspace_pb.GetChangesRequest(agent_id=agent_id), metadata=bearer(token)
                )
        answers[token] = (missing.value.code(), list(listed.schedules), changes.value.code())
    assert answers[READER] == answers[FULL]
    assert answers[READER][0] is grpc.StatusCode.NOT_FOUND
    assert grpc.StatusCode.PERMISSION_DENIED not in answers[READER]


def raw_call(channel: grpc.Channel, path: str, streaming: bool, token: str) -> grpc.StatusCode:
    """The status of `path` called with an empty body (OK when it answered)."""
    identity = bytes
    try:
        if streaming:
            stream = channel.unary_stream(path, identity, identity)
            for _ in stream(b"", metadata=bearer(token), timeout=5):
                break
        else:
            channel.unary_unary(path, identity, identity)(b"", metadata=bearer(token), timeout=5)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def test_every_method_but_the_reads_is_denied_to_a_read_token(secured: DaemonThread) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        for path, streaming in RAW_PATHS:
            code = raw_call(channel, path, streaming, READER)
            if path in READ_METHODS:
                assert code is not grpc.StatusCode.PERMISSION_DENIED, path
            else:
                assert code is grpc.StatusCode.PERMISSION_DENIED, path


async def test_the_web_port_applies_the_same_roles(secured: DaemonThread) -> None:
    assert secured.daemon is not None
    url = f"http://127.0.0.1:{secured.daemon.web_port}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        web = Web(client)
        reader = f"Bearer {READER}"
        listed = await web.unary(
            "AgentService/ListAgents",
            agent_pb.ListAgentsRequest(),
            agent_pb.ListAgentsResponse,
            authorization=reader,
        )
        assert isinstance(listed, agent_pb.ListAgentsResponse)
        info = await web.unary(
            "ServerService/GetServerInfo",
            server_pb.GetServerInfoRequest(),
            server_pb.GetServerInfoResponse,
            authorization=reader,
        )
        assert isinstance(info, server_pb.GetServerInfoResponse) and info.caller_role == "read"
        refused = await web.unary(
            "AgentService/CreateAgent",
            create_request("/"),
            agent_pb.CreateAgentResponse,
            authorization=reader,
        )
        assert isinstance(refused, WebError)
        assert (refused.code, refused.reason) == ("permission_denied", "READ_ONLY_TOKEN")
        messages, status = await web.grpc_web(
            "TurnService/CancelTurn",
            turn_pb.CancelTurnRequest(agent_id="x"),
            turn_pb.CancelTurnResponse,
            authorization=reader,
        )
        assert not messages and (status.code, status.reason) == ("7", "READ_ONLY_TOKEN")


async def test_a_read_token_exports_over_connect_streaming(
    both: tuple[Stubs, str], secured: DaemonThread
) -> None:
    _, agent_id = both
    assert secured.daemon is not None
    url = f"http://127.0.0.1:{secured.daemon.web_port}"
    request = agent_pb.ExportAgentRequest(agent_id=agent_id)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        args = stream_request("AgentService/ExportAgent", request)
        args["headers"]["authorization"] = f"Bearer {READER}"
        async with client.stream(**args) as response:
            stream = Stream(response, agent_pb.ExportAgentResponse, False)
            data = b""
            while (chunk := await stream.read()) is not None:
                data += chunk.data
            assert stream.error() is None
    header, *_, end = data.splitlines()
    assert agent_id.encode() in header and end == b'{"end":{"rows":2}}'


async def test_a_reload_that_makes_a_token_read_only_ends_its_open_calls(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{FULL}\n")
    path.chmod(0o600)
    daemon = DaemonThread(Config(auth_token_file=path)).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            watch = Stubs.of(channel).events.Subscribe(
                event_pb.SubscribeRequest(), metadata=bearer(FULL)
            )
            await watch.read()
            path.write_text(f"{FULL} read\n")
            assert daemon.daemon is not None
            await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_reload(daemon), daemon.loop)
            )
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                while True:
                    await watch.read()
            assert error_details(ended.value).reason == "TOKEN_REVOKED"
            again = Stubs.of(channel).events.Subscribe(
                event_pb.SubscribeRequest(), metadata=bearer(FULL)
            )
            welcome = await again.read()  # a watcher now, welcome as one
            assert isinstance(welcome, event_pb.SubscribeResponse) and welcome.events
            again.cancel()
    finally:
        daemon.stop()


async def _reload(daemon: DaemonThread) -> None:
    assert daemon.daemon is not None
    daemon.daemon.reload_tokens()


def test_the_cli_with_a_read_token_lists_but_cannot_run(
    secured: DaemonThread, tmp_path: Path, capsys: Capture
) -> None:
    reader = tmp_path / "reader"
    reader.write_text(f"{READER} read\n")
    addr = ["--addr", secured.address, "--token-file", str(reader)]
    assert main([*addr, "ls"]) == 0
    assert main([*addr, "run", "--cwd", str(tmp_path), "hello"]) != 0
    err = capsys.readouterr().err
    assert "PERMISSION_DENIED" in err and "READ_ONLY_TOKEN" in err
