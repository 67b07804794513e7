"""The claude-code provider against a tiny stand-in for `claude -p` (claude_code_stub.py): the
edge cases the real program does not produce on demand (a crash mid-turn, a line over the
limit, a line that is not JSON, a resume that fails at start, a refused interrupt, a withdrawn
permission request, a child that ignores SIGTERM and leaves a process in a session of its
own), the session id the agent reports, and the interrupt's fence."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from corral_server.domain.agent import PermissionBehavior, PermissionResponse, Usage
from corral_server.domain.content import TextPart
from corral_server.domain.timeline import AssistantMessage, ToolCall, ToolCallStatus
from corral_server.errors import FailedPrecondition
from corral_server.providers.base import (
    InterruptResult,
    ProviderEvent,
    ProviderItem,
    ProviderPermissionRequested,
    ProviderPermissionResolved,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.child import MAX_LINE_BYTES
from corral_server.providers.claude_code import (
    ClaudeCodeProvider,
    ClaudeCodeSession,
    ClaudeStartFailed,
)
from tests.agents.child import tagged_processes

STUB = Path(__file__).with_name("claude_code_stub.py")
TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled)
TAG = "CORRAL_CLAUDE_STUB_TEST"


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

    def text(self, turn_id: str) -> str:
        return "".join(
            e.item.text
            for e in self.seen
            if isinstance(e, ProviderItem)
            and isinstance(e.item, AssistantMessage)
            and e.turn_id == turn_id
        )


def stub(mode: str, tag: str = "") -> ClaudeCodeProvider:
    env = dict(os.environ) | {TAG: tag or uuid.uuid4().hex}
    return ClaudeCodeProvider([sys.executable, str(STUB), mode], env, name="stub")


async def processes(tag: str, predicate: Callable[[list[int]], bool]) -> None:
    """Waits (10 s at most) until the processes carrying `tag` satisfy `predicate`."""
    async with asyncio.timeout(10):
        while not predicate(pids := tagged_processes(TAG, tag)):
            assert pids is not None
            await asyncio.sleep(0.02)


@pytest.fixture
def events() -> Events:
    return Events()


async def open_session(
    mode: str, tmp_path: Path, events: Events, resume_session_id: str = ""
) -> AsyncIterator[ClaudeCodeSession]:
    provider = stub(mode)
    config = SessionConfig("a1", str(tmp_path), resume_session_id=resume_session_id)
    session = await provider.create_session(config, events)
    try:
        yield session
    finally:
        await session.close()


async def start(session: ClaudeCodeSession, text: str = "hello") -> str:
    return await session.start_turn((TextPart(text),))


async def ended(events: Events, turn_id: str) -> ProviderEvent:
    return await events.until(lambda e: isinstance(e, TERMINAL) and e.turn_id == turn_id)


async def run_turn(
    session: ClaudeCodeSession, events: Events, text: str = "hello"
) -> ProviderEvent:
    return await ended(events, await start(session, text))


@pytest.mark.parametrize("mode", ["echo", "whole"])
async def test_a_turn_streams_its_text_once_under_the_api_message_id_and_completes_with_usage(
    mode: str, tmp_path: Path, events: Events
) -> None:
    async for session in open_session(mode, tmp_path, events):
        turn_id = await start(session, "hello there")
        end = await ended(events, turn_id)
        assert end == ProviderTurnCompleted(turn_id, Usage(5, 5, 2, 0.25))
        assert events.text(turn_id) == "hello there"  # streamed or whole, never twice
        texts = [e for e in events.seen if isinstance(e, ProviderItem)]
        assert {t.provider_message_id for t in texts} == {"m1"}


async def test_a_new_session_is_named_at_start_and_the_agents_own_id_wins(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("echo", tmp_path, events):
        given = session.session_id
        assert uuid.UUID(given)  # passed as --session-id, known before any turn
        await run_turn(session, events)
        assert session.session_id == given  # the stub reports the id it was given
    async for session in open_session("newid", tmp_path, events):
        await run_turn(session, events)
        assert session.session_id == "reported-by-claude"


async def test_resume_passes_the_stored_session_id(tmp_path: Path, events: Events) -> None:
    async for session in open_session("echo", tmp_path, events, resume_session_id="stored-1"):
        assert session.session_id == "stored-1"
        await run_turn(session, events)
        assert session.session_id == "stored-1"  # the stub reports what --resume named


def test_the_command_line_carries_the_protocol_flags_the_model_and_the_mode() -> None:
    provider = ClaudeCodeProvider(["claude"], {})
    config = SessionConfig("a1", "/w", model="opus", mode="plan")
    argv = provider.command(config, "s-1")
    assert argv[:2] == ["claude", "-p"]
    assert (
        "--include-partial-messages" in argv
        and argv[argv.index("--permission-prompt-tool") + 1] == "stdio"
    )
    assert argv[-6:] == ["--session-id", "s-1", "--model", "opus", "--permission-mode", "plan"]
    resumed = provider.command(SessionConfig("a1", "/w", resume_session_id="old"), "s-2")
    assert resumed[-2:] == ["--resume", "old"] and "--session-id" not in resumed
    # claude takes no "default" for --permission-mode, though it names its default so.
    default = provider.command(SessionConfig("a1", "/w", mode="default"), "s-3")
    assert "--permission-mode" not in default


async def test_a_resume_claude_cannot_open_fails_the_start_with_claudes_reason(
    tmp_path: Path, events: Events
) -> None:
    config = SessionConfig("a1", str(tmp_path), resume_session_id="x")
    with pytest.raises(ClaudeStartFailed, match="No conversation found with session ID: x"):
        await stub("gone").create_session(config, events)


async def test_a_command_that_cannot_start_fails_the_start(tmp_path: Path, events: Events) -> None:
    provider = ClaudeCodeProvider([str(tmp_path / "no-claude")], {})
    with pytest.raises(ClaudeStartFailed, match="cannot start"):
        await provider.create_session(SessionConfig("a1", str(tmp_path)), events)


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("crash", "status 3"),
        ("huge", f"over {MAX_LINE_BYTES} bytes"),
        ("garbage", "not JSON: b'Warning: not json at all'"),
    ],
)
async def test_a_claude_that_dies_or_breaks_the_framing_fails_the_turn_and_the_next(
    mode: str, why: str, tmp_path: Path, events: Events
) -> None:
    async for session in open_session(mode, tmp_path, events):
        end = await run_turn(session, events)
        assert isinstance(end, ProviderTurnFailed) and end.error.code == "AGENT_EXITED"
        assert why in end.error.message
        # The next turn fails at once rather than hanging on the dead process.
        again = await run_turn(session, events)
        assert isinstance(again, ProviderTurnFailed) and why in again.error.message


async def test_an_api_error_result_fails_the_turn_as_a_model_error(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("api", tmp_path, events):
        end = await run_turn(session, events)
        assert isinstance(end, ProviderTurnFailed)
        assert (end.error.code, end.error.message) == ("MODEL_ERROR", "API Error: 500 boom")


@pytest.mark.parametrize(
    ("response", "said"),
    [
        (
            PermissionResponse(PermissionBehavior.ALLOW),
            {"behavior": "allow", "updatedInput": {"command": "ls"}},
        ),
        (
            PermissionResponse(PermissionBehavior.ALLOW, updated_input={"command": "ls -a"}),
            {"behavior": "allow", "updatedInput": {"command": "ls -a"}},
        ),
        (
            PermissionResponse(PermissionBehavior.DENY, message="not today"),
            {"behavior": "deny", "message": "not today"},
        ),
    ],
)
async def test_a_permission_answer_reaches_claude_as_allow_with_input_or_deny_with_message(
    response: PermissionResponse, said: dict[str, object], tmp_path: Path, events: Events
) -> None:
    async for session in open_session("ask", tmp_path, events):
        turn_id = await start(session)
        asked = await events.until(lambda e: isinstance(e, ProviderPermissionRequested))
        assert isinstance(asked, ProviderPermissionRequested)
        permission = asked.permission
        assert (permission.name, permission.kind, permission.turn_id) == (
            "Bash",
            "execute",
            turn_id,
        )
        assert dict(permission.input) == {"command": "ls"}
        await session.respond_permission(turn_id, permission.id, response)
        assert isinstance(await ended(events, turn_id), ProviderTurnCompleted)
        assert json.loads(events.text(turn_id)) == said
        calls = [
            e.item
            for e in events.seen
            if isinstance(e, ProviderItem) and isinstance(e.item, ToolCall)
        ]
        allowed = response.behavior is PermissionBehavior.ALLOW
        expected = [ToolCallStatus.PENDING, *([ToolCallStatus.RUNNING] if allowed else [])]
        assert [c.status for c in calls] == [*expected, ToolCallStatus.COMPLETED]
        with pytest.raises(FailedPrecondition, match="not waiting"):
            await session.respond_permission(turn_id, permission.id, response)


async def test_an_interrupt_is_confirmed_and_the_turn_ends_canceled_and_the_session_goes_on(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("slow", tmp_path, events):
        turn_id = await start(session)
        await events.until(lambda e: isinstance(e, ProviderItem))
        assert await session.interrupt("another-turn") is InterruptResult.NOT_RUNNING
        assert await session.interrupt(turn_id) is InterruptResult.CONFIRMED
        assert await ended(events, turn_id) == ProviderTurnCanceled(turn_id, "cancelled")
        assert await session.interrupt(turn_id) is InterruptResult.NOT_RUNNING
        assert await session.interrupt("") is InterruptResult.NOT_RUNNING


async def test_a_refused_interrupt_leaves_the_turn_running_and_a_later_one_is_sent_again(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("refuse", tmp_path, events):
        turn_id = await start(session, "goes on")
        await events.until(lambda e: isinstance(e, ProviderItem))
        assert await session.interrupt("") is InterruptResult.REFUSED
        await events.until(lambda e: isinstance(e, ProviderItem) and "tock" in str(e.item))
        assert await session.interrupt(turn_id) is InterruptResult.CONFIRMED
        assert isinstance(await ended(events, turn_id), ProviderTurnCanceled)


async def test_a_permission_claude_withdraws_on_interrupt_ends_unanswered(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("withdraw", tmp_path, events):
        turn_id = await start(session)
        asked = await events.until(lambda e: isinstance(e, ProviderPermissionRequested))
        assert isinstance(asked, ProviderPermissionRequested)
        assert await session.interrupt(turn_id) is InterruptResult.CONFIRMED
        assert isinstance(await ended(events, turn_id), ProviderTurnCanceled)
        request_id = asked.permission.id
        assert ProviderPermissionResolved(turn_id, request_id, None) in events.seen
        with pytest.raises(FailedPrecondition, match="not waiting"):
            await session.respond_permission(
                turn_id, request_id, PermissionResponse(PermissionBehavior.ALLOW)
            )
        next_turn = await start(session)
        assert isinstance(await ended(events, next_turn), ProviderTurnCompleted)
        assert events.text(next_turn) == "clean"  # nothing answered the withdrawn request


async def test_close_kills_a_claude_that_ignores_sigterm_and_what_it_left_in_another_session(
    tmp_path: Path, events: Events
) -> None:
    tag = uuid.uuid4().hex
    session = await stub("hang", tag).create_session(SessionConfig("a1", str(tmp_path)), events)
    await processes(tag, lambda pids: len(pids) == 2)  # the stub and its sleeper
    turn_id = await start(session)
    await session.close()
    assert tagged_processes(TAG, tag) == []
    assert not [e for e in events.seen if isinstance(e, TERMINAL)]  # nothing after close
    assert turn_id


async def test_a_close_cut_short_by_a_deadline_still_kills_everything(
    tmp_path: Path, events: Events
) -> None:
    tag = uuid.uuid4().hex
    session = await stub("hang", tag).create_session(SessionConfig("a1", str(tmp_path)), events)
    await processes(tag, lambda pids: len(pids) == 2)
    closing = asyncio.create_task(session.close())
    await asyncio.sleep(0)  # the close begins: stdin closed, waiting for an exit
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await processes(tag, lambda pids: not pids)
