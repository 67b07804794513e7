"""The event log's stored spans (store/event_spans.py): every whole aligned span a commit
completes is stored beside its events, whatever the commits' sizes and across a reopen;
retention drops the spans it cuts into; a span read is the same with and without them; a log
written before the table existed gets its spans from the migration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from corral_server.hub.log_reader import SPAN_EVENTS
from corral_server.records import LogEntry, LogSpan
from corral_server.store.database import DB_FILE, Database
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.event_spans import (
    STORED_SPAN_EVENTS,
    STORED_SPAN_MAX_BYTES,
    span_rows,
)
from corral_server.store.schema import MIGRATIONS, SCHEMA_VERSION

N = STORED_SPAN_EVENTS
BIG = 1 << 20


def _entries(first: int, count: int, size: int = 40, agents: int = 1) -> list[LogEntry]:
    return [
        LogEntry(r, f"agent-{r % agents}", f"event {r} ".encode().ljust(size, b"."))
        for r in range(first, first + count)
    ]


async def _write(log: SqliteEventLog, entries: list[LogEntry], batches: list[int]) -> None:
    """`entries` in commits of the given sizes, in turn."""
    start = 0
    for size in batches:
        await log.append_many(entries[start : start + size])
        start += size


async def _stored(database: Database) -> list[tuple[int, str | None, str | None, bytes]]:
    return await database.read(
        lambda conn: conn.execute(
            "SELECT first, agent, agents, frames FROM event_spans ORDER BY first"
        ).fetchall()
    )


def _flat(spans: list[LogSpan]) -> list[tuple[int, str, bytes]]:
    """The spans as (revision, agent, frames) per span event count, for comparison."""
    out = []
    for span in spans:
        agents = span.agents
        each = [agents] * span.events if isinstance(agents, str) else list(agents)
        out.append((span.first, ",".join(each), span.frames))
    return out


def _expected(entries: list[LogEntry]) -> list[tuple[int, str | None, str | None, bytes]]:
    rows, _ = span_rows((), entries)
    return rows


def test_the_hub_reads_spans_the_size_the_store_keeps() -> None:
    assert SPAN_EVENTS == STORED_SPAN_EVENTS


async def test_every_whole_span_is_stored_whatever_the_commits(tmp_path: Path) -> None:
    entries = _entries(1, 5 * N + 10, agents=3)
    entries[N : 2 * N] = [e._replace(agent_id="solo") for e in entries[N : 2 * N]]
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, [1, 2, N - 5, 3 * N, 1, 1, 1, 100])
        stored = await _stored(database)
        assert [row[0] for row in stored] == [1 + k * N for k in range(5)]
        assert stored == _expected(entries)
        assert stored[1][1:3] == ("solo", None)
        assert json.loads(stored[0][2] or "") == [e.agent_id for e in entries[:N]]
        assert stored[0][3] == b"".join(e.event for e in entries[:N])
    finally:
        await database.close()


async def test_a_reopen_finishes_the_span_it_left_incomplete(tmp_path: Path) -> None:
    entries = _entries(1, 3 * N)
    database = await Database.open(tmp_path)
    log = await SqliteEventLog.open(database)
    await _write(log, entries, [N + 7])
    await database.close()
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries[N + 7 :], [5, 2 * N - 12])
        assert await _stored(database) == _expected(entries)
    finally:
        await database.close()


async def test_retention_drops_every_span_it_cuts_into(tmp_path: Path) -> None:
    entries = _entries(1, 4 * N, agents=2)
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database, retain_events=2 * N + 10)
        await _write(log, entries, [N, N, N, N])
        assert log.earliest_revision == 2 * N - 9
        assert [row[0] for row in await _stored(database)] == [2 * N + 1, 3 * N + 1]
        spans = await log.read_spans(0, 4 * N, BIG, N)
        assert spans[0].first == 2 * N - 9
        assert b"".join(s.frames for s in spans) == b"".join(e.event for e in entries[N * 2 - 10 :])
    finally:
        await database.close()


async def test_a_span_too_big_to_store_is_joined_when_read(tmp_path: Path) -> None:
    size = STORED_SPAN_MAX_BYTES // N + 100
    entries = _entries(1, N, size=size) + _entries(N + 1, N)
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await log.append_many(entries)
        assert [row[0] for row in await _stored(database)] == [N + 1]
        spans = await log.read_spans(0, 2 * N, BIG, N)
        assert [(s.first, s.events) for s in spans] == [(1, N), (N + 1, N)]
        assert b"".join(s.frames for s in spans) == b"".join(e.event for e in entries)
    finally:
        await database.close()


async def _without_stored_spans(database: Database) -> None:
    await database.write(lambda conn: conn.execute("DELETE FROM event_spans"))


@pytest.mark.parametrize("after", [0, 1, N - 1, N, N + 3, 3 * N - 2])
async def test_a_span_read_is_the_same_with_and_without_stored_spans(
    tmp_path: Path, after: int
) -> None:
    entries = _entries(1, 4 * N + 5, agents=3)
    entries[2 * N : 3 * N] = [e._replace(agent_id="solo") for e in entries[2 * N : 3 * N]]
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, [7, 2 * N, 2 * N])
        reads = [(after, 200, BIG), (after, 100, 2_000), (after, N, 1), (after, 2 * N, BIG)]
        stored = [await log.read_spans(*read, N) for read in reads]
        await _without_stored_spans(database)
        joined = [await log.read_spans(*read, N) for read in reads]
        assert [_flat(s) for s in stored] == [_flat(s) for s in joined]
        assert stored[0][0].first == after + 1
    finally:
        await database.close()


def _version_10_database_with_events(state: Path, entries: list[LogEntry]) -> None:
    state.mkdir(parents=True)
    conn = sqlite3.connect(state / DB_FILE, isolation_level=None)
    for version, step in enumerate(MIGRATIONS[:10], start=1):
        if isinstance(step, str):
            conn.executescript(step)
        else:
            step(conn)
        conn.execute(f"PRAGMA user_version = {version}")
    conn.executemany("INSERT INTO events VALUES (?, ?, ?)", entries)
    conn.close()


async def test_a_log_from_before_stored_spans_gets_them_from_the_migration(
    tmp_path: Path,
) -> None:
    old = _entries(N - 3, 3 * N, agents=2)  # retention had trimmed its start
    old[N : 2 * N] = [e._replace(agent_id="solo") for e in old[N : 2 * N]]
    state = tmp_path / "state"
    _version_10_database_with_events(state, old)
    database = await Database.open(state)
    try:
        assert (database.opened_version, SCHEMA_VERSION) == (10, 11)
        stored = await _stored(database)
        # The whole spans only: the one it starts inside and the one at its head are not.
        assert [row[0] for row in stored] == [N + 1, 2 * N + 1]
        assert stored == [row for row in _expected(old) if row[0] > N]
        log = await SqliteEventLog.open(database)
        new = _entries(old[-1].revision + 1, N)
        await log.append_many(new)
        assert [row[0] for row in await _stored(database)] == [N + 1, 2 * N + 1, 3 * N + 1]
    finally:
        await database.close()


async def test_a_read_of_whole_spans_takes_them_from_the_table(tmp_path: Path) -> None:
    entries = _entries(1, 3 * N)
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await log.append_many(entries)
        marked = b"".join(e.event.upper() for e in entries[N : 2 * N])
        await database.write(
            lambda conn: conn.execute(
                "UPDATE event_spans SET frames = ? WHERE first = ?", (marked, N + 1)
            )
        )
        spans = await log.read_spans(N - 2, 3 * N, BIG, N)
        assert [span.first for span in spans] == [N - 1, N + 1, 2 * N + 1]
        assert spans[1].frames == marked  # (a copy of the events: only a test changes one)
    finally:
        await database.close()
