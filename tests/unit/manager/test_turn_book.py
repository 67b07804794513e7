"""The turn book (manager/turn_book.py): which turn runs, the handoff, which turns finished,
and whose events are whose."""

from __future__ import annotations

import asyncio

from corral_server.domain.events import TurnTerminal
from corral_server.manager.turn_book import RECENT_FINISHED, TurnBook
from corral_server.manager.turns import AutonomousRun, ForegroundRun
from corral_server.records.memory import InMemoryFinishedTurns


def settled() -> asyncio.Future[TurnTerminal]:
    return asyncio.get_running_loop().create_future()


async def test_a_foreground_turn_owns_its_own_id_and_id_less_events_only() -> None:
    book = TurnBook("a", None)
    book.active = ForegroundRun("t1", settled())
    assert book.accepts("t1") and book.accepts("")
    assert not book.accepts("t2")
    assert await book.ended_by("t1") is book.active
    assert await book.ended_by("t2") is None


async def test_a_finished_turn_frees_the_slot_and_its_late_events_are_dropped() -> None:
    book = TurnBook("a", None)
    run = ForegroundRun("t1", settled())
    book.active = run
    book.finish(run)
    assert book.active is None and not book.busy
    assert not book.accepts("t1") and book.accepts("t2")
    assert await book.is_finished("t1")
    book.active = AutonomousRun("", settled())  # an id-less run owns every other id...
    assert book.accepts("t9")
    assert await book.ended_by("t1") is None  # ...but not the end of a finished turn


async def test_an_id_less_autonomous_turn_is_never_remembered_as_finished() -> None:
    book = TurnBook("a", None)
    run = AutonomousRun("", settled())
    book.active = run
    book.finish(run)
    assert list(book.recent_finished) == []


async def test_the_handoff_keeps_the_agent_busy_without_a_running_turn() -> None:
    book = TurnBook("a", None)
    assert book.open_handoff() is None and not book.handoff  # nothing runs: no handoff
    run = ForegroundRun("t1", settled())
    book.active = run
    assert book.open_handoff() == "t1"
    book.finish(run)
    assert book.busy and book.busy_turn_id == ""


async def test_only_the_recent_finished_turns_stay_in_memory_the_durable_set_keeps_all() -> None:
    durable = InMemoryFinishedTurns()
    book = TurnBook("a", durable)
    for n in range(RECENT_FINISHED + 1):
        run = ForegroundRun(f"t{n}", settled())
        book.active = run
        book.finish(run)
    assert len(book.recent_finished) == RECENT_FINISHED and "t0" not in book.recent_finished
    assert await durable.contains("a", "t0")
    assert await book.is_finished("t0")
