"""The codex provider against a tiny stub app-server (codex_stub.py): the edge cases the real
codex does not produce on demand (a crash mid-turn, a line over the limit, a line that is not
JSON, a request codex never answers, a child that ignores SIGTERM), a request id shared by both
directions, an approval codex settles itself, and notifications that come before the answer to
turn/start. Deadlines run on a FakeClock."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from corral_server.clock import FakeClock
from corral_server.domain.agent import PermissionBehavior, PermissionResponse
from corral_server.domain.content import TextPart
from corral_server.domain.timeline import AssistantMessage
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
from corral_server.providers.codex import CodexProvider, CodexSession, CodexStartFailed

STUB = Path(__file__).with_name("codex_stub.py")
TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled)


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


def stub(mode: str, clock: FakeClock | None = None) -> CodexProvider:
    argv = [sys.executable, str(STUB), mode]
    return CodexProvider(argv, dict(os.environ), name="stub", clock=clock or FakeClock())


@pytest.fixture
def events() -> Events:
    return Events()


async def open_session(
    mode: str, tmp_path: Path, events: Events, clock: FakeClock | None = None
) -> AsyncIterator[CodexSession]:
    session = await stub(mode, clock).create_session(SessionConfig("a1", str(tmp_path)), events)
    try:
        yield session
    finally:
        await session.close()


async def run_turn(session: CodexSession, events: Events, text: str = "hello") -> ProviderEvent:
    turn_id = await session.start_turn((TextPart(text),))
    return await events.until(lambda e: isinstance(e, TERMINAL) and e.turn_id == turn_id)


async def armed(clock: FakeClock) -> None:
    """Until the code under test has armed its 20 s deadline (no time passes)."""
    await asyncio.to_thread(clock.wait_for_timer, 20_000, 10.0)


async def test_deltas_sent_before_the_answer_to_turn_start_belong_to_the_turn(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("echo", tmp_path, events):
        assert session.session_id == "th1"
        ended = await run_turn(session, events, "hello there")
        assert isinstance(ended, ProviderTurnCompleted) and ended.turn_id == "tu1"
        chunks = [e for e in events.seen if isinstance(e, ProviderItem)]
        assert [c.provider_message_id for c in chunks] == ["m1", "m1"]
        assert events.text() == "hello there"


@pytest.mark.parametrize(
    ("mode", "code", "why"),
    [
        ("crash", "AGENT_EXITED", "status 3"),
        ("huge", "AGENT_PROTOCOL_ERROR", "over 16777216 bytes"),
        ("garbage", "AGENT_PROTOCOL_ERROR", "not JSON: b'not json at all'"),
    ],
)
async def test_a_codex_that_dies_or_breaks_the_framing_fails_the_turn_clearly(
    mode: str, code: str, why: str, tmp_path: Path, events: Events
) -> None:
    async for session in open_session(mode, tmp_path, events):
        pid = session._conn.pid if session._conn is not None else 0
        ended = await run_turn(session, events)
        assert isinstance(ended, ProviderTurnFailed) and ended.error.code == code
        assert why in ended.error.message
        # The next turn fails at once rather than hanging on the dead process.
        again = await run_turn(session, events)
        assert isinstance(again, ProviderTurnFailed) and again.error.code == code
        await session.close()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_an_approval_with_the_id_of_the_pending_turn_start_is_told_apart_by_direction(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("ask", tmp_path, events):
        turn_id = await session.start_turn((TextPart("go"),))
        assert turn_id == "tu1"  # the request did not pass for the answer to turn/start
        asked = await events.until(lambda e: isinstance(e, ProviderPermissionRequested))
        assert isinstance(asked, ProviderPermissionRequested)
        permission = asked.permission
        assert [a.id for a in permission.actions] == ["accept", "acceptWithExecpolicyAmendment"]
        assert permission.title == "ls" and permission.input == {"command": "ls", "cwd": "/"}
        allow = PermissionResponse(PermissionBehavior.ALLOW, "acceptWithExecpolicyAmendment")
        await session.respond_permission(turn_id, permission.id, allow)
        await events.until(lambda e: isinstance(e, TERMINAL))
        # The offered decision goes back whole.
        assert (
            events.text() == '{"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["ls"]}}'
        )


async def test_an_approval_codex_settles_itself_ends_the_permission_unanswered(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("resolve", tmp_path, events):
        turn_id = await session.start_turn((TextPart("go"),))
        assert await session.steer(turn_id, (TextPart("and then"),))
        resolved = await events.until(lambda e: isinstance(e, ProviderPermissionResolved))
        asked = next(e for e in events.seen if isinstance(e, ProviderPermissionRequested))
        assert isinstance(resolved, ProviderPermissionResolved) and resolved.behavior is None
        assert resolved.request_id == asked.permission.id
        assert [a.id for a in asked.permission.actions] == [
            "accept",
            "acceptForSession",
            "decline",
            "cancel",
        ]
        await events.until(lambda e: isinstance(e, TERMINAL))
        assert events.text() == '{"decision": "cancel"}'


async def test_a_request_corral_does_not_know_is_answered_method_not_found(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("unknown", tmp_path, events):
        assert isinstance(await run_turn(session, events), ProviderTurnCompleted)
        assert events.text() == "-32601"


async def test_a_refused_turn_start_fails_the_turn_with_codexs_words(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("refuse", tmp_path, events):
        ended = await run_turn(session, events)
        assert isinstance(ended, ProviderTurnFailed) and ended.error.code == "AGENT_ERROR"
        assert ended.error.message == "codex refused the turn: no turns today"


async def test_a_turn_start_codex_never_answers_fails_at_its_deadline(
    tmp_path: Path, events: Events
) -> None:
    clock = FakeClock()
    async for session in open_session("mute", tmp_path, events, clock):
        start = asyncio.create_task(session.start_turn((TextPart("go"),)))
        await armed(clock)
        await clock.advance(20_000)
        turn_id = await start
        ended = await events.until(lambda e: isinstance(e, TERMINAL))
        assert isinstance(ended, ProviderTurnFailed) and ended.turn_id == turn_id
        assert ended.error.code == "AGENT_TIMEOUT"
        assert "did not answer turn/start within 20 s" in ended.error.message


async def test_an_unanswered_interrupt_is_refused_at_its_deadline_and_close_kills_the_child(
    tmp_path: Path, events: Events
) -> None:
    clock = FakeClock()
    session = await stub("hang", clock).create_session(SessionConfig("a1", str(tmp_path)), events)
    turn_id = await session.start_turn((TextPart("go"),))
    assert await session.interrupt("turn-other") is InterruptResult.NOT_RUNNING  # fenced
    interrupt = asyncio.create_task(session.interrupt(turn_id))
    await armed(clock)
    await clock.advance(20_000)
    assert await interrupt is InterruptResult.REFUSED
    pid = session._conn.pid if session._conn is not None else 0
    await session.close()  # codex ignores SIGTERM and stdin's end: SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not any(isinstance(e, TERMINAL) for e in events.seen)


async def test_a_confirmed_interrupt_ends_the_turn_canceled_and_then_answers_not_running(
    tmp_path: Path, events: Events
) -> None:
    async for session in open_session("slow", tmp_path, events):
        turn_id = await session.start_turn((TextPart("go"),))
        assert await session.interrupt(turn_id) is InterruptResult.CONFIRMED
        ended = await events.until(lambda e: isinstance(e, TERMINAL))
        assert isinstance(ended, ProviderTurnCanceled) and ended.turn_id == turn_id
        assert await session.interrupt(turn_id) is InterruptResult.NOT_RUNNING


async def test_a_start_that_fails_leaves_no_process(tmp_path: Path, events: Events) -> None:
    missing = CodexProvider([str(tmp_path / "no-codex")], dict(os.environ), clock=FakeClock())
    assert not missing.info().available and "not found" in missing.info().unavailable_reason
    with pytest.raises(CodexStartFailed, match="cannot start"):
        await missing.create_session(SessionConfig("a1", str(tmp_path)), events)
    # A child that exits before its handshake is answered.
    crashing = CodexProvider([sys.executable, "-c", "import sys; sys.exit(5)"], dict(os.environ))
    with pytest.raises(CodexStartFailed, match="status 5"):
        await crashing.create_session(SessionConfig("a1", str(tmp_path)), events)
