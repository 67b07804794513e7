"""Agent titles through the wire (docs/design.md#titles): the first prompt's first line at
once, the provider's title (the scripted `/title` step) replacing it, a person's title never
replaced, the source kept across a restart, every change an agent update to subscribers, and
the CLI showing them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from corral.v1 import agent_pb2 as agent_pb
from corral.v1 import agent_service_pb2 as svc_pb
from corral.v1 import turn_service_pb2 as turn_pb
from corral_cli.main import main
from corral_server.app import Config
from tests.support.client import Stubs, create_request, text
from tests.support.daemon import DaemonThread, running_daemon
from tests.support.watch import Watch

LONG_LINE = "Please find out why the login page of the admin console rejects every password"
FALLBACK = "Please find out why the login page of the admin console…"
PROMPT = agent_pb.TITLE_SOURCE_PROMPT
PROVIDER = agent_pb.TITLE_SOURCE_PROVIDER
USER = agent_pb.TITLE_SOURCE_USER


@contextlib.asynccontextmanager
async def serving(daemon: DaemonThread) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        yield Stubs.of(channel)


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    with running_daemon() as daemon:
        async with serving(daemon) as stubs:
            yield stubs


async def turn(stubs: Stubs, agent_id: str, *lines: str) -> None:
    """One turn, followed to its end."""
    request = turn_pb.StreamTurnRequest(agent_id=agent_id, content=text(*lines))
    events = [e async for e in stubs.turns.StreamTurn(request)]
    assert events[-1].WhichOneof("event") == "turn_completed"


async def agent_of(stubs: Stubs, agent_id: str) -> agent_pb.Agent:
    agent: agent_pb.Agent = (
        await stubs.agents.GetAgent(svc_pb.GetAgentRequest(agent_id=agent_id))
    ).agent
    return agent


async def create(stubs: Stubs, cwd: Path, title: str = "") -> str:
    agent_id: str = (await stubs.agents.CreateAgent(create_request(str(cwd), title=title))).agent.id
    return agent_id


def titled(title: str) -> Callable[[Any], bool]:
    """An agent update whose agent has `title`."""
    return lambda e: bool(e.HasField("agent_upserted") and e.agent_upserted.agent.title == title)


def titles_seen(watch: Watch) -> list[tuple[str, int]]:
    """(title, source) of each agent update seen, a repeat of the one before left out."""
    out: list[tuple[str, int]] = []
    for event in watch.seen:
        if event.HasField("agent_upserted"):
            agent = event.agent_upserted.agent
            if not out or out[-1] != (agent.title, agent.title_source):
                out.append((agent.title, agent.title_source))
    return out


async def test_the_first_prompt_titles_an_untitled_agent_as_its_turn_starts(
    stubs: Stubs, tmp_path: Path
) -> None:
    agent_id = await create(stubs, tmp_path)
    untitled = await agent_of(stubs, agent_id)
    assert (untitled.title, untitled.title_source) == ("", 0)
    watch = await Watch(stubs, agent_id).synced()
    await turn(stubs, agent_id, "", LONG_LINE, "and the rest of the prompt")
    running = await watch.until(titled(FALLBACK))
    # The same update that says the turn runs: no round trip to any model.
    assert running.agent_upserted.agent.lifecycle.WhichOneof("state") == "running"
    shown = await agent_of(stubs, agent_id)
    assert (shown.title, shown.title_source) == (FALLBACK, PROMPT)
    await turn(stubs, agent_id, "something else entirely")
    assert (await agent_of(stubs, agent_id)).title == FALLBACK
    watch.cancel()


async def test_the_providers_title_replaces_the_fallback_and_subscribers_see_both(
    stubs: Stubs, tmp_path: Path
) -> None:
    agent_id = await create(stubs, tmp_path)
    watch = await Watch(stubs, agent_id).synced()
    await turn(stubs, agent_id, "fix the login", "/title Login  fix", "/reply done")
    await watch.until(titled("Login fix"))
    assert titles_seen(watch) == [("fix the login", PROMPT), ("Login fix", PROVIDER)]
    # A later provider title replaces its own earlier one.
    await turn(stubs, agent_id, "/title Login and logout fix")
    shown = await agent_of(stubs, agent_id)
    assert (shown.title, shown.title_source) == ("Login and logout fix", PROVIDER)
    watch.cancel()


async def test_a_title_a_person_set_is_never_replaced(stubs: Stubs, tmp_path: Path) -> None:
    created = await create(stubs, tmp_path, title="mine")
    await turn(stubs, created, "a first prompt", "/title The provider's")
    shown = await agent_of(stubs, created)
    assert (shown.title, shown.title_source) == ("mine", USER)
    # UpdateAgent takes over from the provider, and keeps it.
    other = await create(stubs, tmp_path)
    await turn(stubs, other, "hello", "/title From the provider")
    mask = field_mask_pb2.FieldMask(paths=["title"])
    update = svc_pb.UpdateAgentRequest(agent_id=other, title="renamed", update_mask=mask)
    updated = (await stubs.agents.UpdateAgent(update)).agent
    assert (updated.title, updated.title_source) == ("renamed", USER)
    await turn(stubs, other, "/title From the provider again")
    shown = await agent_of(stubs, other)
    assert (shown.title, shown.title_source) == ("renamed", USER)


async def test_a_title_and_its_source_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = DaemonThread(Config(state_dir=state)).start()
    try:
        async with serving(first) as stubs:
            agent_id = await create(stubs, tmp_path)
            await turn(stubs, agent_id, "hello", "/title Named by the provider")
    finally:
        first.stop()
    second = DaemonThread(Config(state_dir=state)).start()
    try:
        async with serving(second) as stubs:
            shown = await agent_of(stubs, agent_id)
            assert (shown.title, shown.title_source) == ("Named by the provider", PROVIDER)
            # Still the provider's: its next title replaces it; no prompt does.
            await turn(stubs, agent_id, "a later prompt", "/title Renamed by the provider")
            assert (await agent_of(stubs, agent_id)).title == "Renamed by the provider"
    finally:
        second.stop()


async def test_a_bare_title_directive_is_refused_and_starts_nothing(
    stubs: Stubs, tmp_path: Path
) -> None:
    agent_id = await create(stubs, tmp_path)
    request = turn_pb.SendPromptRequest(agent_id=agent_id, content=text("/title"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stubs.turns.SendPrompt(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await agent_of(stubs, agent_id)).title == ""


def test_the_cli_shows_titles_and_where_they_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table is cut at the terminal's width
    with running_daemon() as daemon:
        addr = daemon.address
        prompt = "tidy the README\n/title README tidy-up"
        assert main(["--addr", addr, "run", "--cwd", str(tmp_path), prompt]) == 0
        capsys.readouterr()
        assert main(["--addr", addr, "ls"]) == 0
        listed = capsys.readouterr().out
        assert listed.splitlines()[1].endswith("  README tidy-up")
        agent_id = listed.splitlines()[1].split()[0]
        assert main(["--addr", addr, "show", agent_id]) == 0
        assert "README tidy-up (from the provider)\n" in capsys.readouterr().out
