"""Resume against the real codex, at the provider (the manager passes `resume_session_id` after
a daemon restart): a new session with the thread id continues that thread in a new codex
process, and a thread codex does not know fails the start clearly, leaving no process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from corral_server.domain.content import TextPart
from corral_server.domain.timeline import AssistantMessage
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderTurnCanceled,
    ProviderTurnCompleted,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.codex import CodexProvider, CodexSession, CodexStartFailed
from tests.agents import programs
from tests.agents.child import sweep
from tests.agents.conftest import Place
from tests.agents.test_codex_provider import no_process_left, provider
from tests.support.fake_models import FakeModelServer

UNKNOWN_THREAD = "01a22d53-0000-7000-8000-000000000000"  # a well-formed id codex never made
TERMINAL = (ProviderTurnCompleted, ProviderTurnFailed, ProviderTurnCanceled)


class Events:
    def __init__(self) -> None:
        self.seen: list[ProviderEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: ProviderEvent) -> None:
        self.seen.append(event)
        self._changed.set()

    async def until(self, predicate: Callable[[ProviderEvent], bool]) -> ProviderEvent:
        async with asyncio.timeout(20):
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
            and e.turn_id == turn_id
            and isinstance(e.item, AssistantMessage)
        )


@pytest.fixture
async def codex(fake: FakeModelServer, place: Place) -> AsyncIterator[CodexProvider]:
    program = programs.codex(place.home, place.cwd, fake.url)
    try:
        yield provider(program)
        await no_process_left(program.tag)
    finally:
        sweep(programs.LEFTOVER_TAG, program.tag)


async def run_turn(session: CodexSession, events: Events, text: str) -> str:
    turn_id = await session.start_turn((TextPart(text),))
    ended = await events.until(lambda e: isinstance(e, TERMINAL) and e.turn_id == turn_id)
    assert isinstance(ended, ProviderTurnCompleted), ended
    return turn_id


async def test_a_session_with_resume_session_id_continues_the_codex_thread(
    codex: CodexProvider, place: Place, fake: FakeModelServer
) -> None:
    events = Events()
    first = await codex.create_session(SessionConfig("a1", str(place.cwd)), events)
    try:
        await run_turn(first, events, "First [[reply: one]]")
    finally:
        await first.close()
    thread_id = first.session_id

    config = SessionConfig("a1", str(place.cwd), resume_session_id=thread_id)
    again = await codex.create_session(config, events)
    try:
        assert again.session_id == thread_id
        turn_id = await run_turn(again, events, "Second [[reply: two]]")
    finally:
        await again.close()
    assert events.text(turn_id) == "two"
    texts = [
        c["text"]
        for item in fake.model_calls()[-1].body["input"]
        if item.get("type") == "message"
        for c in item["content"]
    ]
    assert "First [[reply: one]]" in texts and "one" in texts  # the first turn's history


async def test_resuming_a_thread_codex_does_not_know_fails_the_start_clearly(
    codex: CodexProvider, place: Place
) -> None:
    config = SessionConfig("a1", str(place.cwd), resume_session_id=UNKNOWN_THREAD)
    with pytest.raises(CodexStartFailed, match=f"codex failed its start: .*{UNKNOWN_THREAD}"):
        await codex.create_session(config, Events())
