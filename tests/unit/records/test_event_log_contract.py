"""The EventLog contract, run against every backend (tests/support/stores.py): contiguous
revisions, reads in bounded batches, retention in events and bytes, the incarnation."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.records import EventLog, LogEntry
from tests.support.stores import Records


def event(n: int, size: int = 10) -> bytes:
    return f"e{n}".encode().ljust(size, b".")


async def appended(log: EventLog, count: int, size: int = 10) -> list[LogEntry]:
    """Append revisions next_revision.. (count of them), agent 'a' + n % 3; the entries."""
    entries = [
        LogEntry(n, f"a{n % 3}", event(n, size))
        for n in range(log.next_revision, log.next_revision + count)
    ]
    await asyncio.gather(*(log.append(*entry) for entry in entries))
    return entries


async def test_a_new_log_is_empty_with_an_incarnation(records: Records) -> None:
    log = await records.make_event_log()
    assert (log.head_revision, log.next_revision, log.earliest_revision) == (0, 1, 1)
    assert len(log.incarnation) == 32
    int(log.incarnation, 16)
    assert await log.read(0, 100, 1 << 20) == []


async def test_two_logs_have_different_incarnations(records: Records) -> None:
    first = await records.make_event_log()
    second = await records.make_event_log()
    assert first.incarnation != second.incarnation


async def test_the_incarnation_comes_from_the_mint(records: Records) -> None:
    log = await records.make_event_log(mint=lambda: "inc-1")
    assert log.incarnation == "inc-1"


async def test_appends_read_back_in_revision_order(records: Records) -> None:
    log = await records.make_event_log()
    entries = await appended(log, 20)
    assert (log.head_revision, log.next_revision, log.earliest_revision) == (20, 21, 1)
    assert await log.read(0, 100, 1 << 20) == entries
    assert await log.read(15, 100, 1 << 20) == entries[15:]
    assert await log.read(20, 100, 1 << 20) == []


async def test_an_append_out_of_order_is_refused_at_once(records: Records) -> None:
    log = await records.make_event_log()
    await appended(log, 3)
    for wrong in (3, 5, 0):
        with pytest.raises(ValueError, match="next revision is 4"):
            log.append(wrong, "a", b"x")
    assert log.next_revision == 4


async def test_next_revision_counts_appends_not_yet_committed(records: Records) -> None:
    log = await records.make_event_log()
    first = log.append(1, "a", b"x")
    second = log.append(2, "a", b"y")
    assert log.next_revision == 3
    await asyncio.gather(first, second)
    assert log.head_revision == 2


async def test_a_read_stops_at_its_limit(records: Records) -> None:
    log = await records.make_event_log()
    entries = await appended(log, 10)
    assert await log.read(2, 3, 1 << 20) == entries[2:5]


async def test_a_read_stops_at_its_bytes_but_returns_one_entry_at_least(
    records: Records,
) -> None:
    log = await records.make_event_log()
    entries = await appended(log, 10, size=100)
    assert await log.read(0, 100, 250) == entries[:2]
    assert await log.read(0, 100, 1) == entries[:1]  # one too big still comes alone


async def test_bad_read_bounds_are_refused(records: Records) -> None:
    log = await records.make_event_log()
    with pytest.raises(ValueError):
        await log.read(0, 0, 100)
    with pytest.raises(ValueError):
        await log.read(0, 10, 0)


async def test_retention_in_events_drops_the_oldest(records: Records) -> None:
    log = await records.make_event_log(retain_events=5)
    entries = await appended(log, 12)
    assert (log.earliest_revision, log.head_revision) == (8, 12)
    assert await log.read(0, 100, 1 << 20) == entries[7:]


async def test_retention_in_bytes_drops_the_oldest(records: Records) -> None:
    log = await records.make_event_log(retain_bytes=350)
    entries = await appended(log, 10, size=100)
    assert (log.earliest_revision, log.head_revision) == (8, 10)
    assert await log.read(0, 100, 1 << 20) == entries[7:]


async def test_retention_applies_as_appends_go_one_by_one(records: Records) -> None:
    log = await records.make_event_log(retain_events=3, retain_bytes=1_000)
    for _ in range(6):
        await appended(log, 1, size=100)
        assert log.head_revision - log.earliest_revision + 1 <= 3
    assert [e.revision for e in await log.read(0, 100, 1 << 20)] == [4, 5, 6]


async def test_retention_always_keeps_the_newest_entry(records: Records) -> None:
    log = await records.make_event_log(retain_bytes=50)
    entries = await appended(log, 3, size=100)  # each alone is over the budget
    assert log.earliest_revision == 3
    assert await log.read(0, 100, 1 << 20) == entries[2:]


async def test_a_reader_behind_the_retention_sees_a_later_first_revision(
    records: Records,
) -> None:
    log = await records.make_event_log(retain_events=4)
    await appended(log, 10)
    batch = await log.read(2, 100, 1 << 20)
    assert batch[0].revision == log.earliest_revision == 7  # not 3: it fell behind


async def test_retention_below_one_is_refused(records: Records) -> None:
    with pytest.raises(ValueError, match="retain_events"):
        await records.make_event_log(retain_events=0)
    with pytest.raises(ValueError, match="retain_bytes"):
        await records.make_event_log(retain_bytes=0)


async def test_append_many_keeps_a_batch_with_one_future(records: Records) -> None:
    log = await records.make_event_log()
    await appended(log, 2)
    batch = [LogEntry(3, "a", b"x"), LogEntry(4, "b", b"yy"), LogEntry(5, "a", b"z")]
    future = log.append_many(batch)
    assert log.next_revision == 6
    await future
    assert log.head_revision == 5
    assert await log.read(2, 100, 1 << 20) == batch


async def test_append_many_out_of_order_appends_none_of_the_batch(records: Records) -> None:
    log = await records.make_event_log()
    await appended(log, 1)
    with pytest.raises(ValueError, match="next revision is 3"):
        log.append_many([LogEntry(2, "a", b"x"), LogEntry(4, "a", b"y")])
    assert log.next_revision == 2
    await log.append_many([])
    assert (log.head_revision, log.next_revision) == (1, 2)
    assert await log.read(0, 100, 1 << 20) == [LogEntry(1, "a1", event(1))]
