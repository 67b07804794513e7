"""ProviderSessionDied from each adapter, against the stand-in agents (claude_code_stub.py,
codex_stub.py, acp_stub.py): a process that exits mid-turn ends the turn failed (AGENT_EXITED)
and then reports the session dead, once; a session closed by corral reports no death."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from corral_server.domain.content import TextPart
from corral_server.providers.acp_provider import AcpProvider
from corral_server.providers.base import (
    Provider,
    ProviderEvent,
    ProviderSessionDied,
    ProviderTurnFailed,
    SessionConfig,
)
from corral_server.providers.claude_code import ClaudeCodeProvider
from corral_server.providers.codex import CodexProvider

HERE = Path(__file__).parent
MAKERS: dict[str, Callable[[str], Provider]] = {
    "claude-code": lambda mode: ClaudeCodeProvider(
        [sys.executable, str(HERE / "claude_code_stub.py"), mode], dict(os.environ)
    ),
    "codex": lambda mode: CodexProvider(
        [sys.executable, str(HERE / "codex_stub.py"), mode], dict(os.environ)
    ),
    "acp": lambda mode: AcpProvider(
        [sys.executable, str(HERE / "acp_stub.py"), mode], dict(os.environ)
    ),
}


class Events:
    def __init__(self) -> None:
        self.seen: list[ProviderEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: ProviderEvent) -> None:
        self.seen.append(event)
        self._changed.set()

    async def until(self, predicate: Callable[[ProviderEvent], bool]) -> None:
        async with asyncio.timeout(10):
            while not any(predicate(e) for e in self.seen):
                self._changed.clear()
                await self._changed.wait()


@pytest.mark.parametrize("kind", sorted(MAKERS))
async def test_a_process_that_exits_mid_turn_fails_the_turn_then_reports_the_session_dead(
    kind: str, tmp_path: Path
) -> None:
    events = Events()
    session = await MAKERS[kind]("crash").create_session(SessionConfig("a1", str(tmp_path)), events)
    try:
        turn_id = await session.start_turn((TextPart("hi"),))
        await events.until(lambda e: isinstance(e, ProviderSessionDied))
    finally:
        await session.close()
    ends = [e for e in events.seen if isinstance(e, ProviderTurnFailed | ProviderSessionDied)]
    assert [type(e) for e in ends] == [ProviderTurnFailed, ProviderSessionDied]
    failed, died = ends
    assert isinstance(failed, ProviderTurnFailed) and isinstance(died, ProviderSessionDied)
    assert failed.turn_id == turn_id and failed.error.code == "AGENT_EXITED"
    assert "3" in died.reason  # the exit status


@pytest.mark.parametrize("kind", sorted(MAKERS))
async def test_a_session_closed_by_corral_reports_no_death(kind: str, tmp_path: Path) -> None:
    events = Events()
    session = await MAKERS[kind]("echo").create_session(SessionConfig("a1", str(tmp_path)), events)
    await session.close()
    assert not [e for e in events.seen if isinstance(e, ProviderSessionDied)]
