"""ExportAgent's paging without a server: a timeline re-based (or trimmed) between two pages
ends the export with TIMELINE_RESET instead of a file that mixes two epochs, and an empty
timeline exports a header and an end line only."""

from __future__ import annotations

from typing import Any

import pytest

from corral.v1 import agent_service_pb2 as svc_pb
from corral_server import errors
from corral_server.domain.agent import Agent, AgentId, Idle
from corral_server.domain.timeline import (
    AssistantMessage,
    Cursor,
    Direction,
    FetchResult,
    TimelineRow,
    TimelineWindow,
)
from corral_server.manager.validate import Limits
from corral_server.rpc.export import export_agent

AGENT = Agent(AgentId("a" * 32), "scripted", "/", Idle(), 1, 1, "e1", 3)


def result(epoch: str, rows: list[int], window: TimelineWindow, reset: bool = False) -> FetchResult:
    kept = tuple(TimelineRow(s, 1, AssistantMessage(f"row {s}")) for s in rows)
    return FetchResult(epoch, window, kept, False, False, reset=reset, stale_cursor=reset)


class Timeline:
    """A manager's reads: the tail first, then each AFTER page from `pages`."""

    limits = Limits()

    def __init__(self, window: TimelineWindow, pages: list[FetchResult]) -> None:
        self._window = window
        self._pages = pages

    def get(self, agent_id: str) -> Agent:
        return AGENT

    @property
    def reads(self) -> Timeline:
        """The manager's reads part (manager.reads): this fake answers them itself."""
        return self

    async def fetch_timeline(
        self, agent_id: str, direction: Direction, cursor: Cursor | None, limit: int | None
    ) -> FetchResult:
        if direction is Direction.TAIL:
            return result("e1", [], self._window)
        return self._pages.pop(0)


async def collect(manager: Any) -> bytes:
    request = svc_pb.ExportAgentRequest(agent_id=AGENT.id)
    return b"".join([chunk.data async for chunk in export_agent(manager, request)])


async def test_a_timeline_re_based_between_pages_ends_the_export() -> None:
    window = TimelineWindow(1, 4, 5)
    pages = [result("e1", [1, 2], window), result("e2", [1], TimelineWindow(1, 1, 2), True)]
    with pytest.raises(errors.TimelineReset):
        await collect(Timeline(window, pages))


async def test_rows_trimmed_away_between_pages_end_the_export() -> None:
    window = TimelineWindow(1, 4, 5)
    pages = [result("e1", [1, 2], window), result("e1", [4], TimelineWindow(4, 4, 5))]
    with pytest.raises(errors.TimelineReset):
        await collect(Timeline(window, pages))


async def test_an_empty_timeline_exports_its_header_and_end_only() -> None:
    data = await collect(Timeline(TimelineWindow(0, 0, 1), []))
    lines = data.splitlines()
    assert len(lines) == 2 and lines[1] == b'{"end":{"rows":0}}'
