"""The event log stored as runs (store/event_runs.py): a commit's events become one row per
aligned 64 of them; reads (entries and spans) give exactly the events, however the commits
cut them; retention cuts inside a run exactly; a reopen finds the head; a log written one row
per event before v11 is turned into runs by the migration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from corral_server.hub.log_reader import SPAN_EVENTS
from corral_server.records import LogEntry, LogSpan, spans_of
from corral_server.store.database import DB_FILE, Database
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.event_runs import RUN_EVENTS, RUN_MAX_BYTES, events_as_runs
from corral_server.store.schema import MIGRATIONS, SCHEMA_VERSION

N = RUN_EVENTS
BIG = 1 << 20
Run = tuple[int, int, str | None, str | None, str | None, bytes]


def _entries(first: int, count: int, size: int = 40, agents: int = 1) -> list[LogEntry]:
    return [
        LogEntry(r, f"agent-{r % agents}", f"event {r} ".encode().ljust(size, b"."))
        for r in range(first, first + count)
    ]


async def _write(log: SqliteEventLog, entries: list[LogEntry], commits: list[int]) -> None:
    """`entries` in commits of the given sizes, in turn."""
    start = 0
    for size in commits:
        await log.append_many(entries[start : start + size])
        start += size
    assert start == len(entries)


async def _runs(database: Database) -> list[Run]:
    return await database.read(
        lambda conn: conn.execute(
            "SELECT first, events, agent, agents, ends, frames FROM event_runs ORDER BY first"
        ).fetchall()
    )


def _flat(spans: list[LogSpan]) -> tuple[list[int], list[str], bytes]:
    """Each event's revision and agent, and all frames joined."""
    revisions: list[int] = []
    agents: list[str] = []
    for span in spans:
        revisions += range(span.first, span.first + span.events)
        each = span.agents
        agents += [each] * span.events if isinstance(each, str) else list(each)
    assert len(agents) == len(revisions)
    return revisions, agents, b"".join(span.frames for span in spans)


def _as_entries(entries: list[LogEntry]) -> tuple[list[int], list[str], bytes]:
    return (
        [e.revision for e in entries],
        [e.agent_id for e in entries],
        b"".join(e.event for e in entries),
    )


def test_the_hub_reads_spans_the_size_the_log_stores_runs() -> None:
    assert SPAN_EVENTS == RUN_EVENTS


async def test_a_burst_is_one_row_per_aligned_64_events(tmp_path: Path) -> None:
    entries = _entries(1, 3 * N + 10, agents=3)
    entries[N : 2 * N] = [e._replace(agent_id="solo") for e in entries[N : 2 * N]]
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, [5, len(entries) - 5])
        runs = await _runs(database)
        assert [(r[0], r[1]) for r in runs] == [
            (1, 5),
            (6, N - 5),
            (N + 1, N),
            (2 * N + 1, N),
            (3 * N + 1, 10),
        ]
        _, _, agent, agents, ends, frames = runs[2]
        assert (agent, agents) == ("solo", None)
        assert frames == b"".join(e.event for e in entries[N : 2 * N])
        assert json.loads(ends or "") == [40 * n for n in range(1, N + 1)]
        assert json.loads(runs[3][3] or "") == [e.agent_id for e in entries[2 * N : 3 * N]]
        spans = await log.read_spans(0, 4 * N, BIG, N)
        assert [(s.first, s.events) for s in spans] == [
            (1, N),
            (N + 1, N),
            (2 * N + 1, N),
            (3 * N + 1, 10),
        ]
        assert spans[1].agents == "solo"
        assert _flat(spans) == _as_entries(entries)
    finally:
        await database.close()


COMMITS = [[1, 2, 3, 200, 1, 50, 7], [264], [N, N, N, N, 8], [1] * 44 + [220]]


@pytest.mark.parametrize("commits", COMMITS)
async def test_reads_give_exactly_the_events_however_the_commits_cut_them(
    tmp_path: Path, commits: list[int]
) -> None:
    entries = _entries(1, 264, agents=3)
    entries[70:140] = [e._replace(agent_id="solo") for e in entries[70:140]]
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, commits)
        for after in (0, 1, 63, 64, 65, 100, 200, 263):
            assert await log.read(after, 1_000, BIG) == entries[after:]
            assert await log.read(after, 10, BIG) == entries[after : after + 10]
            for span_events in (1, 4, 16, N):
                for limit in (1, 30, 100, 2 * N):
                    spans = await log.read_spans(after, limit, BIG, span_events)
                    assert spans == spans_of(entries[after : after + limit], span_events)
    finally:
        await database.close()


@pytest.mark.parametrize("budget", [1, 39, 40, 41, 1_000, 2_600, 2_601])
async def test_a_read_stays_within_its_bytes_with_one_event_at_least(
    tmp_path: Path, budget: int
) -> None:
    entries = _entries(1, 3 * N)
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, [10, 3 * N - 10])
        for after in (0, 5, 60):
            want = entries[after : after + max(1, budget // 40)]
            assert await log.read(after, 1_000, budget) == want
            assert await log.read_spans(after, 1_000, budget, N) == spans_of(want, N)
    finally:
        await database.close()


async def test_an_event_over_a_runs_bytes_is_a_run_of_its_own(tmp_path: Path) -> None:
    entries = _entries(1, 10) + _entries(11, 3, size=RUN_MAX_BYTES // 2 + 1) + _entries(14, 10)
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database)
        await log.append_many(entries)
        runs = await _runs(database)
        assert [(r[0], r[1]) for r in runs] == [(1, 11), (12, 1), (13, 11)]
        assert await log.read_spans(0, 100, BIG, N) == spans_of(entries, N)
        assert await log.read_spans(11, 100, 1_000, N) == spans_of(entries[11:12], N)
    finally:
        await database.close()


@pytest.mark.parametrize("retain", [(100, None), (None, 100 * 40)])
async def test_retention_cuts_inside_a_run_exactly_and_goes_on_after_a_reopen(
    tmp_path: Path, retain: tuple[int | None, int | None]
) -> None:
    entries = _entries(1, 5 * N, agents=2)
    database = await Database.open(tmp_path)
    log = await SqliteEventLog.open(database, retain_events=retain[0], retain_bytes=retain[1])
    await _write(log, entries[: 3 * N], [2 * N + 7, N - 7])
    assert (log.earliest_revision, log.head_revision) == (3 * N - 99, 3 * N)
    assert await log.read(0, 1_000, BIG) == entries[3 * N - 100 : 3 * N]
    await database.close()
    database = await Database.open(tmp_path)
    try:
        log = await SqliteEventLog.open(database, retain_events=retain[0], retain_bytes=retain[1])
        assert (log.earliest_revision, log.head_revision) == (3 * N - 99, 3 * N)
        await _write(log, entries[3 * N :], [3, 2 * N - 3])
        assert (log.earliest_revision, log.head_revision) == (5 * N - 99, 5 * N)
        runs = await _runs(database)
        assert runs[0][0] == 5 * N - 99 and sum(r[1] for r in runs) == 100
        spans = await log.read_spans(0, 1_000, BIG, N)
        assert spans == spans_of(entries[5 * N - 100 :], N)
    finally:
        await database.close()


# The version before runs (whatever number the migration has).
BEFORE_RUNS = MIGRATIONS.index(events_as_runs)


def _database_before_runs_with_events(state: Path, entries: list[LogEntry]) -> None:
    state.mkdir(parents=True)
    conn = sqlite3.connect(state / DB_FILE, isolation_level=None)
    for version, step in enumerate(MIGRATIONS[:BEFORE_RUNS], start=1):
        if isinstance(step, str):
            conn.executescript(step)
        else:
            step(conn)
        conn.execute(f"PRAGMA user_version = {version}")
    with conn:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?)", entries)
    conn.close()


async def test_a_log_of_one_row_per_event_becomes_runs(tmp_path: Path) -> None:
    old = _entries(N - 3, 5000, agents=2)  # retention had trimmed its start
    old[N : 2 * N] = [e._replace(agent_id="solo") for e in old[N : 2 * N]]
    big = b"x" * (RUN_MAX_BYTES // 2)  # a range over a run's bytes is cut as a commit is
    old[3 * N : 3 * N + 3] = [e._replace(event=big) for e in old[3 * N : 3 * N + 3]]
    state = tmp_path / "state"
    _database_before_runs_with_events(state, old)
    database = await Database.open(state)
    try:
        assert database.opened_version == BEFORE_RUNS < SCHEMA_VERSION
        runs = await _runs(database)
        assert runs[0][:2] == (N - 3, 4)
        cut = [r[:2] for r in runs if r[1] != N]
        assert cut[1:4] == [(3 * N + 1, 61), (4 * N - 2, 2), (4 * N, 1)]
        log = await SqliteEventLog.open(database)
        assert (log.earliest_revision, log.head_revision) == (N - 3, N + 4996)
        assert await log.read(0, 10_000, 10 * BIG) == old
        new = _entries(old[-1].revision + 1, N)
        await log.append_many(new)
        assert await log.read_spans(N, 10_000, 10 * BIG, N) == spans_of([*old, *new][4:], N)
        # Run again (a version set back by hand), it changes nothing.
        await database.write(events_as_runs)
        assert len(await _runs(database)) == len(runs) + 2  # the new events cross a boundary
    finally:
        await database.close()


async def test_a_read_of_more_runs_than_one_statement_takes(tmp_path: Path) -> None:
    entries = _entries(1, 600, agents=2)
    database = await Database.open(tmp_path, synchronous="NORMAL")
    try:
        log = await SqliteEventLog.open(database)
        await _write(log, entries, [1] * 600)  # a run per commit
        assert len(await _runs(database)) == 600
        assert await log.read_spans(3, 2_048, BIG, N) == spans_of(entries[3:], N)
    finally:
        await database.close()
