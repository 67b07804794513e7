"""The acp provider against tiny stub agents: the edge cases no real agent produces on demand (a
crash mid-turn, a line over the limit, garbage on stdout, an old protocol, a child that ignores
SIGTERM), each against an agent built on the official ACP SDK (acp_sdk_agent.py) and a
hand-framed one (acp_stub.py, which also shares a request id between both directions), and the
file methods confined to the cwd."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from acp import schema

from corral_server.domain.agent import PermissionBehavior, PermissionResponse
from corral_server.domain.content import TextPart
from corral_server.domain.timeline import AssistantMessage, ToolCall, ToolCallStatus
from corral_server.providers import acp_files
from corral_server.providers.acp import AcpSession, AcpStartFailed
from corral_server.providers.acp_items import ItemMapper, Update
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import (
    InterruptResult,
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.jsonrpc import RpcError
from corral_server.providers.sandbox import FileSandbox

STUB = Path(__file__).with_name("acp_stub.py")
SCRIPTS = ("acp_sdk_agent.py", "acp_stub.py")
TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed)


class Events:
    def __init__(self) -> None:
        self.seen: list[ProviderEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: ProviderEvent) -> None:
        self.seen.append(event)
        self._changed.set()

    async def until(self, predicate: Callable[[ProviderEvent], bool]) -> ProviderEvent:
        async with asyncio.timeout(10):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                self._changed.clear()
                await self._changed.wait()

    def text(self) -> str:
        return "".join(
            e.item.text
            for e in self.seen
            if isinstance(e, ProviderItem) and isinstance(e.item, AssistantMessage)
        )


def stub(mode: str, script: str = STUB.name) -> AcpProvider:
    path = STUB.with_name(script)
    return AcpProvider([sys.executable, str(path), mode], dict(os.environ), name="stub")


@pytest.fixture(params=SCRIPTS)
def script(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def events() -> Events:
    return Events()


async def open_session(
    mode: str, tmp_path: Path, events: Events, script: str = STUB.name
) -> AsyncIterator[AcpSession]:
    session = await stub(mode, script).create_session(SessionConfig("a1", str(tmp_path)), events)
    try:
        yield session
    finally:
        await session.close()


async def run_turn(session: AcpSession, events: Events, text: str = "hello") -> ProviderEvent:
    turn_id = await session.start_turn((TextPart(text),))
    return await events.until(lambda e: isinstance(e, TERMINAL) and e.turn_id == turn_id)


async def test_a_turn_streams_chunks_under_one_message_id_and_completes(
    tmp_path: Path, events: Events, script: str
) -> None:
    async for session in open_session("echo", tmp_path, events, script):
        assert session.session_id == "s1"
        assert isinstance(await run_turn(session, events, "hello there"), ProviderTurnCompleted)
        chunks = [e for e in events.seen if isinstance(e, ProviderItem)]
        assert len(chunks) == 2 and len({c.provider_message_id for c in chunks}) == 1
        assert events.text() == "hello there"


@pytest.mark.parametrize(("mode", "why"), [("crash", "status 3"), ("huge", "over 16777216")])
async def test_an_agent_that_dies_or_breaks_the_framing_fails_the_turn(
    mode: str, why: str, tmp_path: Path, events: Events, script: str
) -> None:
    async for session in open_session(mode, tmp_path, events, script):
        ended = await run_turn(session, events)
        assert isinstance(ended, ProviderTurnFailed) and ended.error.code == "AGENT_EXITED"
        assert why in ended.error.message
        # The next turn fails at once rather than hanging on the dead process.
        again = await run_turn(session, events)
        assert isinstance(again, ProviderTurnFailed)


async def test_garbage_lines_on_stdout_are_skipped(
    tmp_path: Path, events: Events, script: str
) -> None:
    async for session in open_session("garbage", tmp_path, events, script):
        assert isinstance(await run_turn(session, events, "still fine"), ProviderTurnCompleted)
        assert events.text() == "still fine"


async def test_an_agent_of_another_protocol_version_fails_its_start(
    tmp_path: Path, events: Events, script: str
) -> None:
    with pytest.raises(AcpStartFailed, match="protocol version 0"):
        await stub("old", script).create_session(SessionConfig("a1", str(tmp_path)), events)


async def test_a_permission_with_the_prompts_id_is_answered_with_the_offered_option(
    tmp_path: Path, events: Events, script: str
) -> None:
    async for session in open_session("ask", tmp_path, events, script):
        turn_id = await session.start_turn((TextPart("go"),))
        asked = await events.until(lambda e: isinstance(e, ProviderPermissionRequested))
        assert isinstance(asked, ProviderPermissionRequested)
        assert [a.id for a in asked.permission.actions] == ["yes", "no"]
        deny = PermissionResponse(PermissionBehavior.DENY)
        await session.respond_permission(turn_id, asked.permission.id, deny)
        await events.until(lambda e: isinstance(e, TERMINAL))
        assert json.loads(events.text()) == {"outcome": "selected", "optionId": "no"}


async def test_close_kills_an_agent_that_ignores_sigterm_and_interrupt_is_fenced(
    tmp_path: Path, events: Events, script: str
) -> None:
    session = await stub("hang", script).create_session(SessionConfig("a1", str(tmp_path)), events)
    turn_id = await session.start_turn((TextPart("go"),))
    assert await session.interrupt("turn-other") is InterruptResult.NOT_RUNNING
    pid = session._conn.pid if session._conn is not None else 0
    await session.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not any(isinstance(e, TERMINAL) and e.turn_id == turn_id for e in events.seen)


async def test_files_are_confined_to_the_cwd(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    (tmp_path / "secret").write_text("no")
    (cwd / "link").symlink_to(tmp_path / "secret")
    files = FileSandbox(str(cwd))
    await acp_files.write_text_file(files, {"path": str(cwd / "a" / "b.txt"), "content": "hi"})
    assert await acp_files.read_text_file(files, {"path": str(cwd / "a" / "b.txt")}) == {
        "content": "hi"
    }
    assert await acp_files.read_text_file(files, {"path": str(cwd / "missing")}) == {"content": ""}
    for bad in (str(cwd / ".." / "secret"), str(cwd / "link"), "relative.txt"):
        with pytest.raises(RpcError):
            await acp_files.read_text_file(files, {"path": bad})
        with pytest.raises(RpcError):
            await acp_files.write_text_file(files, {"path": bad, "content": "x"})
    with pytest.raises(RpcError, match="line must be a positive integer"):
        await acp_files.read_text_file(files, {"path": str(cwd / "a" / "b.txt"), "line": 0})
    assert (tmp_path / "secret").read_text() == "no"


def as_update(update: dict[str, object]) -> Update:
    """A `session/update`'s update as the SDK reads it off the wire."""
    return schema.SessionNotification.model_validate({"sessionId": "s", "update": update}).update


def test_a_repeated_tool_call_id_is_an_update_of_the_whole_call() -> None:
    items = ItemMapper()
    items.start_turn("t1")
    call = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Bash"}
    items.map(as_update({**call, "rawInput": {}}))
    [update] = items.map(as_update({**call, "status": "completed"}))
    assert update.item == ToolCall("c1", "Bash", ToolCallStatus.COMPLETED, input={})


async def test_an_interrupt_answers_a_pending_permission_cancelled_and_cancels_the_turn(
    tmp_path: Path, events: Events, script: str
) -> None:
    async for session in open_session("ask", tmp_path, events, script):
        turn_id = await session.start_turn((TextPart("go"),))
        await events.until(lambda e: isinstance(e, ProviderPermissionRequested))
        assert await session.interrupt(turn_id) is InterruptResult.CONFIRMED
        # The stub ends with end_turn regardless; a confirmed interrupt ends the turn canceled.
        ended = await events.until(lambda e: isinstance(e, (*TERMINAL, ProviderTurnCanceled)))
        assert isinstance(ended, ProviderTurnCanceled) and ended.turn_id == turn_id
        assert json.loads(events.text()) == {"outcome": "cancelled"}
        assert await session.interrupt(turn_id) is InterruptResult.NOT_RUNNING
