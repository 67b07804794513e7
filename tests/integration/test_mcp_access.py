"""Who the MCP endpoint lets in, through the wire: a token whose MAC is not ASCII is refused
(401, not a server error); a closed or archived agent's token opens nothing, and the sessions
that agent had open end when it is closed (a call waiting in one is cut, and the next call is
refused). Waits run on the daemon's FakeClock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from corral.v1 import agent_service_pb2 as agent_pb
from tests import conftest
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonThread

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
SLEEP_MS = 90_000


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[DaemonThread]:
    daemon = DaemonThread(replace(conftest.test_config(), mcp_listen="127.0.0.1:0")).start()
    yield daemon
    daemon.stop()


def endpoint(daemon: DaemonThread) -> Any:
    assert daemon.daemon is not None and daemon.daemon.mcp is not None
    return daemon.daemon.mcp


async def post(daemon: DaemonThread, authorization: bytes) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(
            endpoint(daemon).url,
            json=LIST,
            headers={b"accept": b"application/json", b"authorization": authorization},
        )


@contextlib.asynccontextmanager
async def session(daemon: DaemonThread, agent_id: str) -> AsyncIterator[Client]:
    server = endpoint(daemon).server_for(agent_id)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.bearer_token}"}) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        yield client


async def daemon_side(daemon: DaemonThread, read: Callable[[], int]) -> int:
    """`read()` on the daemon's loop."""

    async def run() -> int:
        return read()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), daemon.loop))


async def new_root(stubs: Stubs, cwd: Path) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id)


async def refused_session(daemon: DaemonThread, agent_id: str) -> bool:
    """Whether opening an MCP session with the agent's own token fails with the SDK's error
    for the endpoint's 401."""
    try:
        async with session(daemon, agent_id):
            return False
    except ExceptionGroup as group:
        return group.subgroup(MCPError) is not None


@pytest.mark.parametrize(
    "mac", ["\u00e9" * 64, "0" * 63 + "\u00ff", "\u00e9"], ids=["latin", "last", "one"]
)
async def test_a_token_whose_mac_is_not_ascii_is_refused_with_401(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path, mac: str
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    reply = await post(daemon, f"Bearer {root}.{mac}".encode("latin-1"))
    assert reply.status_code == 401 and reply.json()["error"] == "invalid_token"
    utf8 = await post(daemon, f"Bearer {root}.{mac}".encode())
    assert utf8.status_code == 401


async def test_a_closed_or_archived_agents_token_is_refused(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    closed, archived, open_ = [await new_root(stubs, tmp_path) for _ in range(3)]
    await stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=closed))
    await stubs.agents.ArchiveAgent(agent_pb.ArchiveAgentRequest(agent_id=archived))
    token = endpoint(daemon).tokens.token_for(closed)
    reply = await post(daemon, f"Bearer {token}".encode())
    assert reply.status_code == 401 and reply.json()["error"] == "invalid_token"
    assert await refused_session(daemon, closed)
    assert await refused_session(daemon, archived)
    assert not await refused_session(daemon, open_)


async def test_closing_an_agent_ends_its_open_session(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    async with session(daemon, root) as client:
        spawned = await client.call_tool("spawn_subagent", {"task": f"/sleep {SLEEP_MS}"})
        assert spawned.structured_content is not None
        run_id = spawned.structured_content["run_id"]
        await asyncio.to_thread(daemon.clock.wait_for_timer, SLEEP_MS)
        waiting = asyncio.create_task(
            client.call_tool("wait_for_subagent", {"run_id": run_id, "timeout_s": 600})
        )
        await asyncio.to_thread(daemon.clock.wait_for_timer, 600_000)  # the wait is armed
        await stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=root))
        with pytest.raises(MCPError):  # the waiting call is cut
            await asyncio.wait_for(waiting, 30)
        with pytest.raises(MCPError):  # and the session is gone
            await asyncio.wait_for(client.call_tool("list_subagents", {}), 30)
    assert await daemon_side(daemon, lambda: endpoint(daemon).open_requests) == 0


LEGACY = "2025-06-18"  # a handshake-era revision: the SDK keeps a session for it


async def legacy_session(http: httpx2.AsyncClient, url: str) -> str:
    """Initialize a stateful session the way agents of the 2025 revisions do; its id."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    reply = await http.post(
        url, json=hello, headers={"accept": "application/json, text/event-stream"}
    )
    assert reply.status_code == 200, reply.text
    session_id = reply.headers["mcp-session-id"]
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {"mcp-session-id": session_id, "mcp-protocol-version": LEGACY}
    done = await http.post(
        url, json=ready, headers={**headers, "accept": "application/json, text/event-stream"}
    )
    assert done.status_code == 202, done.text
    return session_id


async def test_closing_an_agent_ends_its_stateful_session_and_its_open_stream(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    server = endpoint(daemon).server_for(root)
    auth = {"Authorization": f"Bearer {server.bearer_token}"}
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http")
    async with httpx2.AsyncClient(headers=auth, timeout=30) as http:
        session_id = await legacy_session(http, server.url)
        headers = {
            "mcp-session-id": session_id,
            "mcp-protocol-version": LEGACY,
            "accept": "text/event-stream",
        }
        async with http.stream("GET", server.url, headers=headers) as stream:
            assert stream.status_code == 200
            await stubs.agents.CloseAgent(agent_pb.CloseAgentRequest(agent_id=root))
            body = b"".join([chunk async for chunk in stream.aiter_bytes()])  # it ends
        assert b"data:" not in body
        again = await http.get(server.url, headers=headers)
        assert again.status_code == 401
    deadline = asyncio.get_running_loop().time() + 30
    while f"Terminating session: {session_id}" not in caplog.text:  # the SDK let it go
        assert asyncio.get_running_loop().time() < deadline, caplog.text
        await asyncio.sleep(0.01)
    assert await daemon_side(daemon, lambda: endpoint(daemon).open_requests) == 0
