"""A providers file changed under a running daemon (docs/design.md#live-config), seen by the
daemon's stat poll on its (fake) clock, or by its SIGHUP handler: a bad file keeps the running
configuration and logs one line naming file, table and key; a changed model or mode default
moves the live agents still on the old one, in place; a changed process signature restarts
each agent's process once, at its next idle moment, never mid-turn, however many reloads
see the change."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from corral.v1 import agent_pb2
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_server.app import Config
from corral_server.providers import registry
from corral_server.providers.config import load
from tests.support.client import Stubs, create_request, prompt_request, text
from tests.support.daemon import DaemonThread

DEADLINE_S = 20.0


@dataclass
class Served:
    daemon: DaemonThread
    stubs: Stubs
    path: Path


def write(path: Path, content: str) -> None:
    """Replace the file whole (a new inode: the poll sees it whatever the mtime's grain)."""
    fresh = path.with_suffix(".new")
    fresh.write_text(content)
    os.replace(fresh, path)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    path = tmp_path / "corral.toml"
    write(
        path,
        '[providers.demo]\nkind = "scripted"\n\n[providers.fixed]\nkind = "scripted"\n'
        "live_settings = false\n",
    )
    config = Config(providers=registry.with_builtins(load(path)), config_file=path)
    daemon = DaemonThread(config).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Served(daemon, Stubs.of(channel), path)
    finally:
        daemon.stop()


async def until(served: Served, check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll until `check`, moving the daemon's clock past each poll of the file."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await served.daemon.advance_async(1_000)
        await asyncio.sleep(0.01)


async def agent(stubs: Stubs, agent_id: str) -> agent_pb2.Agent:
    reply = await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    got: agent_pb2.Agent = reply.agent
    return got


async def create(stubs: Stubs, cwd: Path, provider: str = "demo", **kw: str) -> agent_pb2.Agent:
    reply = await stubs.agents.CreateAgent(create_request(str(cwd), provider=provider, **kw))
    made: agent_pb2.Agent = reply.agent
    return made


def reload_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_bad_file_keeps_the_running_configuration_with_one_line_naming_the_key(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral")
    write(served.path, '[providers.demo]\nkind = "scripted"\nmode = "plan"\nmodle = "x"\n')

    async def refused() -> bool:
        return bool(reload_lines(caplog, "refused"))

    await until(served, refused, "the refusal's log line")
    [line] = reload_lines(caplog, "refused")
    assert str(served.path) in line and "[providers.demo]" in line and "'modle'" in line
    made = await create(served.stubs, tmp_path)
    assert made.mode == "default"  # the file's new mode did not apply: none of it did
    # More polls of the same bad file say nothing more.
    for _ in range(3):
        await served.daemon.advance_async(1_000)
    assert len(reload_lines(caplog, "refused")) == 1
    # A mode the provider does not have is refused too, naming table and key.
    write(served.path, '[providers.demo]\nkind = "scripted"\nmode = "warp"\n')

    async def refused_twice() -> bool:
        return len(reload_lines(caplog, "refused")) == 2

    await until(served, refused_twice, "the second refusal")
    assert "[providers.demo]: unknown mode 'warp'" in reload_lines(caplog, "refused")[1]


async def test_a_changed_default_moves_the_live_agents_on_the_old_one_in_place(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral")
    follower = await create(served.stubs, tmp_path)
    chose = await create(served.stubs, tmp_path, mode="plan")
    stuck = await create(served.stubs, tmp_path, provider="fixed")
    session_id = follower.provider_session_id
    write(
        served.path,
        '[providers.demo]\nkind = "scripted"\nmode = "plan"\n\n'
        '[providers.fixed]\nkind = "scripted"\nlive_settings = false\nmode = "plan"\n',
    )

    async def moved() -> bool:
        return (await agent(served.stubs, follower.id)).mode == "plan"

    await until(served, moved, "the follower's new mode")
    now = await agent(served.stubs, follower.id)
    assert now.provider_session_id == session_id  # in place: the same session
    request = turn_pb.StreamTurnRequest(agent_id=follower.id, content=text("/settings"))
    events = [e async for e in served.stubs.turns.StreamTurn(request)]
    rows = [e.row.item for e in events if e.HasField("row")]
    said = [r.assistant_message.text for r in rows if r.HasField("assistant_message")]
    assert said == ["model= mode=plan"]  # the running session was told
    assert (await agent(served.stubs, chose.id)).mode == "plan"
    # The provider that cannot change it live keeps the agent as it was, and the line says why.
    assert (await agent(served.stubs, stuck.id)).mode == "default"
    [line] = reload_lines(caplog, "config reloaded")
    assert f"changed in place: {follower.id}" in line and f"refused: {stuck.id}" in line
    # A new agent gets the new default.
    assert (await create(served.stubs, tmp_path)).mode == "plan"


async def test_a_changed_process_restarts_each_agent_once_when_idle_never_mid_turn(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral")
    stubs, daemon = served.stubs, served.daemon
    idle = await create(stubs, tmp_path)
    busy = await create(stubs, tmp_path)
    await stubs.turns.SendPrompt(prompt_request(busy.id, "/sleep 3600000\n/reply done"))
    write(
        served.path,
        '[providers.demo]\nkind = "scripted"\nsteer = true\n\n'
        '[providers.fixed]\nkind = "scripted"\nlive_settings = false\n',
    )
    assert daemon.daemon is not None
    # Two SIGHUPs at once (and the poll, which finds the file as the first reload read it).
    daemon.loop.call_soon_threadsafe(daemon.daemon.on_sighup)
    daemon.loop.call_soon_threadsafe(daemon.daemon.on_sighup)

    async def idle_restarted() -> bool:
        return (await agent(stubs, idle.id)).provider_session_id != idle.provider_session_id

    await until(served, idle_restarted, "the idle agent's restart")

    await until(served, lambda: _lines_at_least(caplog, 2), "both reloads")
    restarted = await agent(stubs, idle.id)
    still = await agent(stubs, busy.id)
    assert still.lifecycle.WhichOneof("state") == "running"
    assert still.provider_session_id == busy.provider_session_id  # not mid-turn
    # The turn ends: the busy agent restarts now, once.
    await daemon.advance_async(3_600_000)

    async def busy_restarted() -> bool:
        got = await agent(stubs, busy.id)
        return got.provider_session_id != busy.provider_session_id

    await until(served, busy_restarted, "the busy agent's restart")
    for _ in range(3):  # more polls and reloads change nothing more
        await daemon.advance_async(1_000)
    daemon.loop.call_soon_threadsafe(daemon.daemon.on_sighup)
    await until(served, lambda: _lines_at_least(caplog, 3), "a third reload")
    assert (await agent(stubs, idle.id)).provider_session_id == restarted.provider_session_id
    assert daemon.daemon.manager.turn_counts.restarts == 2
    lines = reload_lines(caplog, "config reloaded")
    assert f"agents restarting when idle: {idle.id}, {busy.id}" in lines[0] or (
        f"agents restarting when idle: {busy.id}, {idle.id}" in lines[0]
    )
    assert all("nothing changed" in line for line in lines[1:])


async def _lines_at_least(caplog: pytest.LogCaptureFixture, count: int) -> bool:
    return len(reload_lines(caplog, "config reloaded")) >= count
