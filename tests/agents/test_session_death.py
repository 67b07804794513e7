"""An agent process that dies mid-turn, through corral's wire, with the stand-in agents of
tests/unit/providers (Claude Code stream-json, codex app-server and ACP): the turn fails once
with AGENT_EXITED (one error row), the adapter reports the session dead, and the next turn runs
in a new process (resuming the session by id where the provider can) instead of failing on the
dead one. Also: the session id an agent reports after a turn is the one corral stores."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from corral_server.app import Config
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import Provider
from corral_server.providers.claude_code import ClaudeCodeProvider
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.resume_support import create_agent, get_agent, timeline, turn
from tests.agents.test_claude_code_provider import no_process_left
from tests.support.client import Stubs
from tests.support.daemon import DaemonThread

STUBS = Path(__file__).parents[1] / "unit" / "providers"
CRASH_ONCE = Path(__file__).with_name("crash_once.py")

# Not codex_stub.py: every process of it names its turn "tu1", so the second process's turn
# looks like the finished first one (tests/unit/providers/test_session_died.py covers the
# codex adapter's report of a death).
MAKERS: dict[str, Callable[[list[str], dict[str, str]], Provider]] = {
    "claude_code_stub.py": lambda argv, env: ClaudeCodeProvider(argv, env, name="stub"),
    "acp_stub.py": lambda argv, env: AcpProvider(argv, env, name="stub"),
}


async def serving(provider: Provider) -> AsyncIterator[Stubs]:
    daemon = DaemonThread(Config(extra_providers={"stub": provider})).start()
    try:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            yield Stubs.of(channel)
    finally:
        daemon.stop()


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex


@pytest.fixture
async def no_leftovers(tag: str) -> AsyncIterator[None]:
    try:
        yield
        await no_process_left(tag)
    finally:
        sweep(programs.LEFTOVER_TAG, tag)


@pytest.fixture(params=sorted(MAKERS))
async def crash_once(
    request: pytest.FixtureRequest, tmp_path: Path, tag: str, no_leftovers: None
) -> AsyncIterator[Stubs]:
    """A daemon whose provider `stub` runs a stand-in that crashes mid-turn the first time."""
    argv = [sys.executable, str(CRASH_ONCE), str(STUBS / request.param), str(tmp_path / "ran")]
    env = dict(os.environ) | {programs.LEFTOVER_TAG: tag}
    async for stubs in serving(MAKERS[request.param](argv, env)):
        yield stubs


async def test_a_turn_whose_agent_process_dies_fails_once_and_the_next_turn_runs_in_a_new_one(
    crash_once: Stubs, tmp_path: Path
) -> None:
    stubs = crash_once
    agent_id = await create_agent(stubs, tmp_path, "stub")
    events = await turn(stubs, agent_id, "first")
    assert events[-1].WhichOneof("event") == "turn_failed"
    error = events[-1].turn_failed.error
    assert error.code == "AGENT_EXITED" and "3" in error.message  # its exit status
    session_id = (await get_agent(stubs, agent_id)).provider_session_id

    events = await turn(stubs, agent_id, "second")
    assert events[-1].WhichOneof("event") == "turn_completed"
    said = "".join(e.row.item.assistant_message.text for e in events if e.HasField("row"))
    assert said == "second"
    rows = await timeline(stubs, agent_id)
    first = rows[: rows.index(("user_message", "second"))]
    assert first[0] == ("user_message", "first")
    assert next(row for row in first if row[0] == "error") == ("error", "AGENT_EXITED")
    assert first.count(("error", "AGENT_EXITED")) == 1  # the death added no second row
    assert rows[-2:] == [("user_message", "second"), ("assistant_message", "second")]
    agent = await get_agent(stubs, agent_id)
    assert agent.lifecycle.WhichOneof("state") == "idle"
    if ("error", "RESUME_FAILED") in first:  # acp_stub cannot session/load: it says so
        assert agent.last_error.code == "RESUME_FAILED"
    else:  # resumed by id: the same provider session
        assert agent.provider_session_id == session_id


async def test_an_agent_that_names_another_session_id_after_a_turn_has_that_id_stored(
    tmp_path: Path, tag: str, no_leftovers: None
) -> None:
    argv = [sys.executable, str(STUBS / "claude_code_stub.py"), "newid"]
    env = dict(os.environ) | {programs.LEFTOVER_TAG: tag}
    async for stubs in serving(ClaudeCodeProvider(argv, env, name="stub")):
        agent_id = await create_agent(stubs, tmp_path, "stub")
        given = (await get_agent(stubs, agent_id)).provider_session_id
        events = await turn(stubs, agent_id, "hello")
        assert events[-1].WhichOneof("event") == "turn_completed"
        agent = await get_agent(stubs, agent_id)
        assert given != "reported-by-claude"
        assert agent.provider_session_id == "reported-by-claude"
