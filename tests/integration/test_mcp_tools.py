"""The sub-agent tools over MCP (docs/mcp.md), through the wire with the SDK's own client:
an agent spawns, lists, waits for, steers and kills its sub-agents and answers their
permissions; another agent can neither see nor touch them; a call without a token corral
minted never reaches a tool. Waits run on the daemon's FakeClock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from corral.v1 import turn_service_pb2 as turn_pb
from tests import conftest
from tests.support.client import Stubs, create_request
from tests.support.daemon import DaemonThread

TOOLS = {
    "spawn_subagent",
    "list_subagents",
    "wait_for_subagent",
    "steer_subagent",
    "kill_subagent",
    "answer_subagent_permission",
}


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[DaemonThread]:
    daemon = DaemonThread(replace(conftest.test_config(), mcp_listen="127.0.0.1:0")).start()
    yield daemon
    daemon.stop()


class Agent:
    """An MCP client speaking as one agent (with the token corral gives that agent)."""

    def __init__(self, client: Client, agent_id: str) -> None:
        self.client = client
        self.id = agent_id

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, result.content
        content: dict[str, Any] | None = result.structured_content
        assert content is not None
        return content

    async def refused(self, tool: str, **arguments: Any) -> str:
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error and result.structured_content is None
        text: str = getattr(result.content[0], "text", "")
        return text


def endpoint(daemon: DaemonThread) -> Any:
    assert daemon.daemon is not None and daemon.daemon.mcp is not None
    return daemon.daemon.mcp


@contextlib.asynccontextmanager
async def as_agent(daemon: DaemonThread, agent_id: str) -> AsyncIterator[Agent]:
    server = endpoint(daemon).server_for(agent_id)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.bearer_token}"}) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        yield Agent(client, agent_id)


async def new_root(stubs: Stubs, cwd: Path) -> str:
    return str((await stubs.agents.CreateAgent(create_request(str(cwd)))).agent.id)


async def sleeping_for(daemon: DaemonThread, ms: int) -> None:
    """Until the daemon's code armed a timer due in `ms` (a scripted `/sleep` began)."""
    await asyncio.to_thread(daemon.clock.wait_for_timer, ms)


async def test_an_agent_spawns_waits_for_and_lists_its_sub_agent(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    root = await new_root(stubs, tmp_path)
    async with as_agent(daemon, root) as agent:
        listed = await agent.client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        run = await agent.call("spawn_subagent", task="/sleep 5000\ndone sleeping", label="nap")
        assert run["requester_agent_id"] == root and run["label"] == "nap"
        waiting = asyncio.create_task(
            agent.call("wait_for_subagent", run_id=run["run_id"], timeout_s=60)
        )
        await sleeping_for(daemon, 5000)
        assert not waiting.done()
        await daemon.advance_async(5000)  # the child wakes and answers
        ended = await waiting
        assert ended["state"] == "ended" and ended["outcome"] == "ok"
        assert ended["result_text"] == "You said: done sleeping"
        assert ended["child_agent_id"] == run["child_agent_id"]
        listed_runs = await agent.call("list_subagents")
    assert [r["run_id"] for r in listed_runs["runs"]] == [run["run_id"]]
    assert listed_runs["active_descendants"] == 0


async def test_a_wait_that_times_out_returns_the_run_still_running(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    async with as_agent(daemon, root) as agent:
        run = await agent.call("spawn_subagent", task="/sleep 9000")
        await sleeping_for(daemon, 9000)
        waiting = asyncio.create_task(
            agent.call("wait_for_subagent", run_id=run["run_id"], timeout_s=2)
        )
        await sleeping_for(daemon, 2000)  # the wait's own timeout is armed
        await daemon.advance_async(2000)
        still = await waiting
        assert still["state"] == "running" and still["outcome"] is None
        active = await agent.call("list_subagents", active_only=True)
        assert [r["run_id"] for r in active["runs"]] == [run["run_id"]]
        await agent.call("kill_subagent", run_id=run["run_id"], cascade=True)


async def test_kill_with_cascade_stops_a_child_and_its_grandchild(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    async with as_agent(daemon, root) as agent:
        keep = await agent.call("spawn_subagent", task="/sleep 70000")
        # The child spawns a grandchild that sleeps, then sleeps itself.
        doomed = await agent.call("spawn_subagent", task="/spawn /sleep 60000\n/sleep 50000")
        await sleeping_for(daemon, 60000)  # the grandchild is asleep
        await sleeping_for(daemon, 50000)  # and the child too
        tree = await agent.call("list_subagents")
        below = [r for r in tree["runs"] if r["requester_agent_id"] == doomed["child_agent_id"]]
        assert len(below) == 1 and tree["active_descendants"] == 3
        killed = await agent.call("kill_subagent", run_id=doomed["run_id"], cascade=True)
        assert sorted(killed["killed_run_ids"]) == sorted([doomed["run_id"], below[0]["run_id"]])
        after = {r["run_id"]: r for r in (await agent.call("list_subagents"))["runs"]}
        assert after[doomed["run_id"]]["outcome"] == "killed"
        assert after[below[0]["run_id"]]["outcome"] == "killed"
        assert after[keep["run_id"]]["state"] == "running"  # its sibling goes on
        await agent.call("kill_subagent", run_id=keep["run_id"])


async def test_another_agent_can_neither_see_nor_control_those_sub_agents(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    stubs = Stubs.of(aio_channel)
    a, b = await new_root(stubs, tmp_path), await new_root(stubs, tmp_path)
    async with as_agent(daemon, a) as agent_a, as_agent(daemon, b) as agent_b:
        run = await agent_a.call("spawn_subagent", task="/permission write\nwritten")
        child = run["child_agent_id"]
        status = await stubs.turns.WaitForIdle(turn_pb.WaitForIdleRequest(agent_id=child))
        assert status.status == turn_pb.WAIT_STATUS_PERMISSION
        assert (await agent_b.call("list_subagents"))["runs"] == []
        run_id = run["run_id"]
        request_id = status.agent.pending_permissions[0].id
        refusals = [
            await agent_b.refused("wait_for_subagent", run_id=run_id, timeout_s=0),
            await agent_b.refused("steer_subagent", run_id=run_id, message="stop"),
            await agent_b.refused("kill_subagent", run_id=run_id, cascade=True),
            await agent_b.refused(
                "answer_subagent_permission", agent_id=child, request_id=request_id, allow=True
            ),
        ]
        assert all("is not one of your sub-agents" in text for text in refusals)
        # A run that does not exist gets the very same answer.
        assert "is not one of your sub-agents" in await agent_b.refused(
            "kill_subagent", run_id="no-such-run", cascade=False
        )
        # Its owner sees the request and answers it.
        (asking,) = (await agent_a.call("list_subagents"))["runs"][0]["pending_permissions"]
        assert asking["request_id"] == request_id and asking["name"] == "write"
        answered = await agent_a.call(
            "answer_subagent_permission", agent_id=child, request_id=request_id, allow=True
        )
        assert answered["pending_permissions"] == []
        ended = await agent_a.call("wait_for_subagent", run_id=run_id, timeout_s=60)
    assert ended["outcome"] == "ok" and ended["result_text"] == "You said: written"


async def test_a_child_sees_only_its_own_subtree(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    async with as_agent(daemon, root) as parent:
        sibling = await parent.call("spawn_subagent", task="/sleep 80000")
        run = await parent.call("spawn_subagent", task="/spawn /sleep 40000\n/sleep 30000")
        await sleeping_for(daemon, 40000)
        await sleeping_for(daemon, 30000)
        async with as_agent(daemon, run["child_agent_id"]) as child:
            (own,) = (await child.call("list_subagents"))["runs"]
            assert own["requester_agent_id"] == child.id
            for theirs in (run["run_id"], sibling["run_id"]):  # its own run, its sibling's
                assert "is not one of your sub-agents" in await child.refused(
                    "kill_subagent", run_id=theirs, cascade=True
                )
        await parent.call("kill_subagent", run_id=run["run_id"], cascade=True)
        await parent.call("kill_subagent", run_id=sibling["run_id"], cascade=True)


async def test_steer_replaces_a_running_sub_agent_run(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    async with as_agent(daemon, root) as agent:
        run = await agent.call("spawn_subagent", task="/sleep 20000")
        await sleeping_for(daemon, 20000)
        steered = await agent.call("steer_subagent", run_id=run["run_id"], message="go left")
        assert steered["run_id"] != run["run_id"] and steered["task"] == "go left"
        assert steered["child_agent_id"] == run["child_agent_id"]
        ended = await agent.call("wait_for_subagent", run_id=steered["run_id"], timeout_s=60)
        old = await agent.call("wait_for_subagent", run_id=run["run_id"], timeout_s=0)
    assert ended["result_text"] == "You said: go left"
    assert old["state"] == "ended" and steered["run_id"] in old["end_reason"]


async def test_bad_arguments_and_spawn_refusals_are_tool_errors(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    async with as_agent(daemon, root) as agent:
        assert "task" in await agent.refused("spawn_subagent", task="  ")
        assert "UNKNOWN_PROVIDER" in await agent.refused(
            "spawn_subagent", task="hi", provider="nope"
        )
        assert "timeout_s" in await agent.refused("wait_for_subagent", run_id="x", timeout_s=-1)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}],
    ids=["missing", "unknown", "not-bearer"],
)
async def test_a_request_without_a_token_corral_minted_is_refused(
    daemon: DaemonThread, headers: dict[str, str]
) -> None:
    url = endpoint(daemon).url
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(headers=headers) as http:
        reply = await http.post(url, json=body, headers={"accept": "application/json"})
    assert reply.status_code == 401 and reply.json()["error"] == "invalid_token"


async def test_a_forged_token_for_a_real_agent_is_refused(
    aio_channel: Any, daemon: DaemonThread, tmp_path: Path
) -> None:
    root = await new_root(Stubs.of(aio_channel), tmp_path)
    token = endpoint(daemon).tokens.token_for(root)
    forged = token[:-4] + ("1111" if token.endswith("0000") else "0000")
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {forged}"}) as http:
        with pytest.raises(ExceptionGroup) as caught:  # the SDK's client: the 401, in groups
            async with Client(streamable_http_client(endpoint(daemon).url, http_client=http)):
                pass
    assert caught.group_contains(MCPError)
