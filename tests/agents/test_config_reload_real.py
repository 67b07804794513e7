"""A reloaded providers file restarts a real Claude Code agent's process and resumes its
session (docs/design.md#live-config): a changed `env` of its `[providers.NAME]` entry gives
it a new process at its next idle moment, the same provider session id, and a next turn that
continues the conversation (the model is sent the earlier turn)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers import registry
from corral_server.providers.config import load
from tests.agents import programs
from tests.agents.child import sweep, tagged_processes
from tests.agents.conftest import Place
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread
from tests.support.fake_models import FakeModelServer

DEADLINE_S = 30.0


def entry(program: programs.Program, marker: str) -> str:
    env = {**program.env, "CORRAL_TEST_MARKER": marker}
    pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
    return (
        f'[providers.claude-code]\nkind = "claude-code"\ncommand = [{json.dumps(program.argv[0])}]'
        f"\nenv = {{ {pairs} }}\ninherit_env = false\n"
    )


def write(path: Path, content: str) -> None:
    fresh = path.with_suffix(".new")
    fresh.write_text(content)
    os.replace(fresh, path)


@pytest.fixture
def program(fake: FakeModelServer, place: Place) -> programs.Program:
    assert programs.installed("claude"), "claude is not installed: run buildscripts/test"
    return programs.claude_code(place.home, place.cwd, fake.url)


@pytest.fixture
async def served(
    program: programs.Program, tmp_path: Path
) -> AsyncIterator[tuple[DaemonThread, Stubs, Path]]:
    path = tmp_path / "corral.toml"
    write(path, entry(program, "one"))
    config = Config(providers=registry.with_builtins(load(path)), config_file=path)
    daemon = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield daemon, Stubs.of(channel), path
    finally:
        daemon.stop()
        sweep(programs.LEFTOVER_TAG, program.tag)


async def turn(stubs: Stubs, agent_id: str, prompt: str) -> None:
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(prompt))
    kinds = [str(e.WhichOneof("event")) async for e in stubs.turns.StreamTurn(request)]
    assert kinds[-1] == "turn_completed", kinds


async def test_a_changed_env_restarts_claude_and_resumes_its_session(
    served: tuple[DaemonThread, Stubs, Path],
    program: programs.Program,
    place: Place,
    fake: FakeModelServer,
) -> None:
    daemon, stubs, path = served
    request = create_request(str(place.cwd), provider="claude-code", model=programs.CLAUDE_MODEL)
    agent = (await stubs.agents.CreateAgent(request, timeout=60)).agent
    await turn(stubs, agent.id, "Remember the word pelican [[reply: noted]]")
    before = set(tagged_processes(programs.LEFTOVER_TAG, program.tag))
    assert before
    write(path, entry(program, "two"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    # The daemon's poll of the file, on its fake clock; then the restart, on the agent's queue.
    while not tagged_processes("CORRAL_TEST_MARKER", "two"):
        assert loop.time() < deadline, "claude was not restarted"
        await daemon.advance_async(1_000)
        await asyncio.sleep(0.05)
    got = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent.id))
    assert got.agent.provider_session_id == agent.provider_session_id  # resumed
    calls = len(fake.model_calls())
    await turn(stubs, agent.id, "Which word? [[reply: pelican]]")
    sent = json.dumps(fake.model_calls()[calls].body["messages"])
    assert "Remember the word pelican" in sent  # the conversation went on
    assert not before & set(tagged_processes(programs.LEFTOVER_TAG, program.tag))
