"""The provider-event inbox (manager/inbox.py): one drain per burst, rows batched in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from corral_server.domain.timeline import AssistantMessage, UserMessage
from corral_server.manager.inbox import ProviderInbox
from corral_server.manager.writer import TimelineWriter
from corral_server.providers.base import (
    ProviderEvent,
    ProviderItem,
    ProviderTurnCompleted,
)
from corral_server.timeline.store import NewRow


class Handler:
    """Records what the drain does, in order: batches appended, flushes, events handled."""

    def __init__(self) -> None:
        self.log: list[Any] = []
        self.open = True

    @property
    def writer(self) -> TimelineWriter:
        return cast(TimelineWriter, self)

    def append_nowait(self, rows: list[NewRow]) -> None:
        if rows:
            self.log.append(("append", [_text(r) for r in rows]))

    async def flush(self) -> None:
        self.log.append("flush")

    def takes_rows(self) -> bool:
        return self.open

    def history_row(self, event: ProviderItem) -> NewRow:
        return NewRow(event.item, 0, "")

    def fragment_rows(self, event: ProviderItem) -> tuple[NewRow, ...]:
        return (NewRow(event.item, 0, event.turn_id),)

    async def handle(self, event: ProviderEvent) -> None:
        self.log.append(("handle", type(event).__name__))


def _text(row: NewRow) -> str:
    assert isinstance(row.item, AssistantMessage)
    return row.item.text


def text(t: str, history: bool = False) -> ProviderItem:
    return ProviderItem("t1", AssistantMessage(t, "m1"), from_history=history)


class Jobs:
    def __init__(self) -> None:
        self.posted: list[Callable[[], Awaitable[None]]] = []

    def post(self, op: Callable[[], Awaitable[None]]) -> None:
        self.posted.append(op)


async def test_a_burst_of_events_costs_one_job_and_its_rows_one_batch() -> None:
    handler, jobs = Handler(), Jobs()
    inbox = ProviderInbox(handler, jobs.post)
    for t in ("a", "b", "c"):
        inbox.add(text(t))
    assert len(jobs.posted) == 1
    await jobs.posted[0]()
    assert handler.log == [("append", ["a", "b", "c"])]
    inbox.add(text("d"))  # the next burst posts the next drain
    assert len(jobs.posted) == 2


async def test_other_events_are_handled_after_the_rows_before_them() -> None:
    handler, jobs = Handler(), Jobs()
    inbox = ProviderInbox(handler, jobs.post)
    inbox.add(text("a"))
    inbox.add(ProviderItem("t1", UserMessage("hi", "", "")))  # judged on its own (echoes)
    inbox.add(text("b"))
    inbox.add(ProviderTurnCompleted("t1"))
    await jobs.posted[0]()
    assert handler.log == [
        ("append", ["a"]),
        ("handle", "ProviderItem"),
        ("append", ["b"]),
        ("handle", "ProviderTurnCompleted"),
    ]


async def test_history_flushes_what_came_before_and_batches_with_the_history_after_it() -> None:
    handler, jobs = Handler(), Jobs()
    inbox = ProviderInbox(handler, jobs.post)
    for event in (text("a"), text("h1", True), text("h2", True), text("b")):
        inbox.add(event)
    await jobs.posted[0]()
    assert handler.log == [("append", ["a"]), "flush", ("append", ["h1", "h2", "b"])]


async def test_history_is_dropped_once_the_agent_takes_no_rows() -> None:
    handler, jobs = Handler(), Jobs()
    handler.open = False
    inbox = ProviderInbox(handler, jobs.post)
    inbox.add(text("h1", True))
    await jobs.posted[0]()
    assert handler.log == []
