"""The usage ledger's contract, in memory and in SQLite alike: entries add up by agent,
provider, model and UTC day over a half-open time range; the book regroups them as a query
asks, and its counters start from what the ledger holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from corral_server.domain.agent import Agent, AgentId, Idle, Usage
from corral_server.domain.usage import GroupBy, UsageEntry, UsageGroup, UsageQuery
from corral_server.manager.usage import UsageBook
from corral_server.records.usage import InMemoryUsageLedger, UsageLedger
from corral_server.store.database import Database
from corral_server.store.usage import SqliteUsageLedger

DAY_MS = 86_400_000
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


@pytest.fixture(params=("memory", "sqlite"))
async def ledgers(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], UsageLedger]]:
    """Makes ledgers over one backend; a second one of the same database sees the first's."""
    if request.param == "memory":
        memory = InMemoryUsageLedger()
        yield lambda: memory
        return
    database = await Database.open(tmp_path / "state", synchronous="NORMAL")
    try:
        yield lambda: SqliteUsageLedger(database)
    finally:
        await database.close()


def entry(agent: str, ended_ms: int, tokens: int, cost: float = 0.0, **kw: str) -> UsageEntry:
    usage = Usage(tokens, 2 * tokens, tokens // 2, cost)
    return UsageEntry(
        agent, f"t-{ended_ms}", ended_ms, kw.get("provider", "p"), kw.get("model", "m"), usage
    )


async def test_entries_add_up_by_agent_provider_model_and_day(
    ledgers: Callable[[], UsageLedger],
) -> None:
    ledger = ledgers()
    await ledger.record(entry("a", T0, 10, 0.25))
    await ledger.record(entry("a", T0 + 1, 20, 0.5))
    await ledger.record(entry("a", T0 + DAY_MS, 1, model="other"))
    await ledger.record(entry("b", T0, 4))
    fine = sorted(await ledger.fine(None, None), key=lambda g: g.key)
    assert fine == [
        UsageGroup("a", "p", "m", "2023-11-14", Usage(30, 60, 15, 0.75), 2),
        UsageGroup("b", "p", "m", "2023-11-14", Usage(4, 8, 2, 0.0), 1),
        UsageGroup("a", "p", "other", "2023-11-15", Usage(1, 2, 0, 0.0), 1),
    ]
    assert [g.turns for g in await ledger.fine(T0 + 1, T0 + DAY_MS)] == [1]
    assert await ledger.fine(T0 + DAY_MS + 1, None) == []
    assert await ledgers().fine(None, None) != []  # another handle on the same store sees it


async def test_the_book_regroups_and_its_counters_start_from_the_ledger(
    ledgers: Callable[[], UsageLedger],
) -> None:
    book = UsageBook(ledgers())
    agent = Agent(AgentId("a"), "p", "/", Idle(), T0, T0, "e", 1, model="m")
    await book.record(agent, "t1", Usage(1, 2, 0, 0.5), T0)
    await book.record(agent, "t2", Usage(3, 4, 0, 0.25), T0 + DAY_MS)
    by_day = await book.query(UsageQuery(None, None, None, frozenset({GroupBy.DAY})))
    assert [(g.day, g.agent_id, g.usage.input_tokens) for g in by_day] == [
        ("2023-11-14", "", 1),
        ("2023-11-15", "", 3),
    ]
    none = await book.query(UsageQuery(frozenset({"z"}), None, None, frozenset()))
    assert none == []
    reopened = UsageBook(ledgers())
    await reopened.open()
    assert reopened.counters == {("p", "m"): (Usage(4, 6, 0, 0.75), 2)}
