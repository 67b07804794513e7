"""Real Claude Code, started by corral with `corral serve --mcp-listen`, sees corral's sub-agent
tools and spawns a sub-agent through them (docs/mcp.md), against the fake Anthropic API:
the model is offered `mcp__corral__*`, calls `spawn_subagent`, and the run it made is the
Claude agent's own."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest

from corral.v1 import subagent_pb2 as sub_pb
from corral.v1 import subagent_service_pb2 as sub_svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers.claude_code import ClaudeCodeProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.conftest import Place
from tests.agents.test_claude_code_provider import (
    claude_agent,
    kinds,
    no_process_left,
    rest_of,
    rows,
    stream,
    until_permission,
)
from tests.support.client import Stubs
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer
from tests.support.subagents import subagents

ALLOW = turn_pb.PERMISSION_BEHAVIOR_ALLOW
COMPLETED = 3  # corral.v1.ToolCallStatus
TOOLS = (
    "spawn_subagent",
    "list_subagents",
    "wait_for_subagent",
    "steer_subagent",
    "kill_subagent",
    "answer_subagent_permission",
)


@pytest.fixture
async def served(fake: FakeModelServer, place: Place) -> AsyncIterator[tuple[Stubs, DaemonThread]]:
    program = programs.claude_code(place.home, place.cwd, fake.url)
    assert programs.installed("claude"), "claude is not installed: run buildscripts/test"
    provider = ClaudeCodeProvider(program.argv[:1], program.env)
    config = Config(extra_providers={"claude-code": provider}, mcp_listen="127.0.0.1:0")
    daemon = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel), daemon
    finally:
        daemon.stop()
        await no_process_left(program.tag)
        sweep(programs.LEFTOVER_TAG, program.tag)


async def test_claude_code_is_given_corrals_tools_and_spawns_a_sub_agent_with_them(
    served: tuple[Stubs, DaemonThread], place: Place, fake: FakeModelServer
) -> None:
    stubs, daemon = served
    agent_id = await claude_agent(stubs, place)
    spawn = json.dumps({"task": "hello from claude", "provider": "scripted"})
    call = stream(
        stubs, agent_id, f"[[tool: mcp__corral__spawn_subagent {spawn}]] [[reply: spawned]]"
    )
    asked = await until_permission(call)  # Claude Code asks before an MCP tool, as for any
    assert asked.title == "Allow mcp__corral__spawn_subagent?"
    await stubs.turns.RespondToPermission(
        turn_pb.RespondToPermissionRequest(agent_id=agent_id, request_id=asked.id, behavior=ALLOW)
    )
    events = await rest_of(call)
    assert kinds(events)[-1] == "turn_completed"
    tool = rows(events, "tool_call")[-1]
    assert tool.name == "mcp__corral__spawn_subagent" and tool.status == COMPLETED, tool.error

    # Claude Code defers MCP tools behind its ToolSearch: the model is told their names.
    first_call = json.dumps(fake.model_calls()[0].body)
    assert all(f"mcp__corral__{name}" in first_call for name in TOOLS)
    runs = await subagents_of(daemon, agent_id)
    assert [r.task for r in runs] == ["hello from claude"]
    assert runs[0].run_id in fake.model_calls()[1].tool_results[0]  # the tool's answer


async def subagents_of(daemon: DaemonThread, agent_id: str) -> list[sub_pb.SubagentRun]:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        reply = await subagents(channel).ListSubagentRuns(
            sub_svc_pb.ListSubagentRunsRequest(agent_id=agent_id)
        )
    return list(reply.runs)
