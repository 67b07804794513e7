"""Codex's own fork, against the real codex offline (the fake Responses API): `fork_session`
makes a new thread of the source's turns before the cut's turn, which a session resuming it
continues; the source thread keeps every turn."""

from __future__ import annotations

import pytest

from corral_server.providers.base import ForkPoint, SessionConfig
from corral_server.providers.codex import CodexProvider, CodexStartFailed
from tests.agents.conftest import Place
from tests.agents.test_codex_resume import UNKNOWN_THREAD, Events, codex, run_turn
from tests.support.fake_models import FakeModelServer

__all__ = ["codex"]  # the fixture, shared


def texts_sent(fake: FakeModelServer) -> list[str]:
    """The message texts of the model's last call: what the thread held."""
    return [
        c["text"]
        for item in fake.model_calls()[-1].body["input"]
        if item.get("type") == "message"
        for c in item["content"]
    ]


async def test_a_fork_before_a_turn_continues_without_it_and_leaves_the_source_whole(
    codex: CodexProvider, place: Place, fake: FakeModelServer
) -> None:
    events = Events()
    source = await codex.create_session(SessionConfig("a1", str(place.cwd)), events)
    try:
        await run_turn(source, events, "First [[reply: one]]")
        second = await run_turn(source, events, "Second [[reply: two]]")
    finally:
        await source.close()

    point = ForkPoint(source.session_id, "the second prompt", second)
    forked = await codex.fork_session(point, str(place.cwd), "")
    assert forked and forked != source.session_id

    fork = await codex.create_session(
        SessionConfig("a2", str(place.cwd), resume_session_id=forked), events
    )
    try:
        assert fork.session_id == forked
        await run_turn(fork, events, "Third [[reply: three]]")
    finally:
        await fork.close()
    sent = texts_sent(fake)
    assert "First [[reply: one]]" in sent and "one" in sent
    assert "Second [[reply: two]]" not in sent and "two" not in sent

    again = await codex.create_session(
        SessionConfig("a1", str(place.cwd), resume_session_id=source.session_id), events
    )
    try:
        await run_turn(again, events, "Fourth [[reply: four]]")
    finally:
        await again.close()
    assert "Second [[reply: two]]" in texts_sent(fake)


async def test_forking_a_thread_codex_does_not_know_fails_clearly(
    codex: CodexProvider, place: Place
) -> None:
    point = ForkPoint(UNKNOWN_THREAD, "m", "turn-1")
    with pytest.raises(CodexStartFailed, match=UNKNOWN_THREAD):
        await codex.fork_session(point, str(place.cwd), "")
