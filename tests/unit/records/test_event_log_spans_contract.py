"""The EventLog's span reads (`read_spans`, what the catch-up path reads), against every
backend: exactly the entries `read` returns, in order, joined into aligned spans with each
event's agent, within the same limits (the byte bound may cut a span earlier)."""

from __future__ import annotations

import asyncio

import pytest

from corral_server.records import EventLog, LogEntry, LogSpan
from tests.support.stores import Records

BIG = 1 << 20


async def append(log: EventLog, agents: list[str], size: int = 10) -> list[LogEntry]:
    first = log.next_revision
    entries = [
        LogEntry(first + n, agent, f"e{first + n}".encode().ljust(size, b"."))
        for n, agent in enumerate(agents)
    ]
    await asyncio.gather(*(log.append(*entry) for entry in entries))
    return entries


def flat(spans: list[LogSpan]) -> tuple[bytes, list[str], list[int]]:
    """The spans' frames joined, each event's agent, each event's revision."""
    agents: list[str] = []
    revisions: list[int] = []
    for span in spans:
        each = span.agents
        agents += [each] * span.events if isinstance(each, str) else list(each)
        assert len(agents) == len(revisions) + span.events
        revisions += range(span.first, span.first + span.events)
    return b"".join(span.frames for span in spans), agents, revisions


def same(spans: list[LogSpan], entries: list[LogEntry]) -> bool:
    joined = b"".join(entry.event for entry in entries)
    return flat(spans) == (
        joined,
        [entry.agent_id for entry in entries],
        [entry.revision for entry in entries],
    )


async def test_spans_hold_exactly_the_entries_in_order_with_their_agents(
    records: Records,
) -> None:
    log = await records.make_event_log()
    entries = await append(log, [f"a{n % 3}" for n in range(20)])  # mixed
    entries += await append(log, ["solo"] * 30)  # one agent
    entries += await append(log, ["a1", "a2"] * 7)
    for after in (0, 3, 17, 40, 63):
        spans = await log.read_spans(after, 100, BIG, 8)
        assert same(spans, entries[after:])
        assert all(1 <= span.events <= 8 for span in spans)
        assert all((span.first - 1) % 8 == 0 for span in spans[1:])
    spans = await log.read_spans(0, 100, BIG, 8)
    assert [span.agents for span in spans[3:6]] == ["solo", "solo", "solo"]


async def test_a_span_read_stops_at_its_limit(records: Records) -> None:
    log = await records.make_event_log()
    entries = await append(log, ["a"] * 30)
    assert same(await log.read_spans(5, 12, BIG, 4), entries[5:17])


async def test_a_span_read_stays_within_its_bytes_and_returns_one_event_at_least(
    records: Records,
) -> None:
    log = await records.make_event_log()
    entries = await append(log, ["a", "b"] * 15, size=100)
    for budget in (1_000, 450, 250):
        spans = await log.read_spans(0, 100, budget, 4)
        count = sum(span.events for span in spans)
        assert same(spans, entries[:count])
        assert budget // 100 - 4 < count <= budget // 100
    assert same(await log.read_spans(0, 100, 1, 4), entries[:1])  # one too big comes alone


async def test_events_too_big_to_join_come_in_spans_of_their_own(records: Records) -> None:
    log = await records.make_event_log()
    entries = await append(log, ["a"] * 10, size=100)
    entries += await append(log, ["a", "b", "a"], size=3_000)  # over 10_000 / 4 each
    entries += await append(log, ["b"] * 10, size=100)
    assert same(await log.read_spans(0, 100, 100_000, 4), entries)
    spans = await log.read_spans(0, 100, 10_000, 4)
    count = sum(span.events for span in spans)
    assert same(spans, entries[:count]) and 10 <= count <= 13
    assert same(await log.read_spans(10, 100, 10, 4), entries[10:11])


async def test_a_span_reader_behind_the_retention_starts_at_the_earliest(
    records: Records,
) -> None:
    log = await records.make_event_log(retain_events=6)
    entries = await append(log, ["a", "b", "c"] * 5)
    spans = await log.read_spans(2, 100, BIG, 4)
    assert spans[0].first == log.earliest_revision == 10
    assert same(spans, entries[9:])


async def test_an_empty_log_or_a_read_at_the_head_has_no_spans(records: Records) -> None:
    log = await records.make_event_log()
    assert await log.read_spans(0, 100, BIG, 4) == []
    await append(log, ["a"] * 3)
    assert await log.read_spans(3, 100, BIG, 4) == []


async def test_bad_span_read_bounds_are_refused(records: Records) -> None:
    log = await records.make_event_log()
    for bounds in ((0, 100, 4), (10, 0, 4), (10, 100, 0)):
        with pytest.raises(ValueError):
            await log.read_spans(0, *bounds)
