"""The event log's rows (the `event_runs` table): each commit's events stored as runs, a run
being up to RUN_EVENTS consecutive events of one commit with their frames joined in one blob.

Why runs: a subscriber catching up from the log reads it as spans of consecutive events
(store/log_spans.py). Stored one row per event, a read of 2,048 events cost SQLite a step and
a copy per event, and the commit an index entry and a row per event; stored as runs, a burst
of events is one row per RUN_EVENTS of them, written once and read as it was written.

A run never crosses a multiple of RUN_EVENTS (`first - 1` of the run after it is one, or it
ends a commit) and holds at most RUN_MAX_BYTES of frames unless it is one event: so a span
of the log's readers (aligned the same way) is one run after a burst, a few after small
commits. Columns: `first` (the revision of its first event), `events` (how many), `agent`
(the agent of all of them, NULL when they have several), `agents` (each event's agent, a JSON
array, when several), `ends` (the end offset of each event's frame in `frames`, a JSON array,
NULL for one event) and `frames`.

Retention drops whole runs and cuts the one it ends inside (rewritten from the first event
kept: event_log.py), so the first revision of the first run is always the earliest retained.

Must not: run on the event loop, or know what a frame holds.
"""

from __future__ import annotations

import json
import sqlite3
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, pairwise
from operator import attrgetter

from corral_server.records.store import LogEntry

RUN_EVENTS = 64
RUN_MAX_BYTES = 64 << 10

RunRow = tuple[int, int, str | None, str | None, str | None, bytes]
"""event_runs' columns, in order."""

INSERT = (
    "INSERT INTO event_runs (first, events, agent, agents, ends, frames) VALUES (?, ?, ?, ?, ?, ?)"
)
_AGENT = attrgetter("agent_id")
_EVENT = attrgetter("event")
_COMPACT = (",", ":")


def runs_of(entries: Sequence[LogEntry]) -> list[RunRow]:
    """`entries` (contiguous, in order) as runs."""
    rows: list[RunRow] = []
    start = 0
    while start < len(entries):
        first = entries[start].revision
        part = entries[start : start + RUN_EVENTS - (first - 1) % RUN_EVENTS]
        ends = list(accumulate(map(len, map(_EVENT, part))))
        if ends[-1] > RUN_MAX_BYTES:
            fit = max(1, bisect_right(ends, RUN_MAX_BYTES))
            part, ends = part[:fit], ends[:fit]
        rows.append(_run(part, ends))
        start += len(part)
    return rows


def _run(part: Sequence[LogEntry], ends: list[int]) -> RunRow:
    agents = list(map(_AGENT, part))
    one = agents[0] if agents.count(agents[0]) == len(agents) else None
    return (
        part[0].revision,
        len(part),
        one,
        None if one is not None else json.dumps(agents, separators=_COMPACT),
        json.dumps(ends, separators=_COMPACT) if len(part) > 1 else None,
        b"".join(map(_EVENT, part)),
    )


def entries_of(row: RunRow) -> list[LogEntry]:
    """A run's events."""
    first, count, agent, agents, ends, frames = row
    offsets = [0, *(json.loads(ends) if ends else [len(frames)])]
    each = [agent] * count if agent is not None else json.loads(agents or "[]")
    return [LogEntry(first + n, each[n], frames[offsets[n] : offsets[n + 1]]) for n in range(count)]


def lengths_of(count: int, ends: str | None, size: int) -> list[int]:
    """Each event's frame length, from a run's `events`, `ends` and frames' length."""
    if count == 1 or ends is None:
        return [size]
    at = json.loads(ends)
    return [at[0], *(b - a for a, b in pairwise(at))]


def store_runs(conn: sqlite3.Connection, entries: Sequence[LogEntry]) -> None:
    """In the writer thread, in the commit's transaction."""
    conn.executemany(INSERT, runs_of(entries))


def cut_runs(conn: sqlite3.Connection, keep_from: int) -> None:
    """In the writer thread: drop every event before `keep_from` (retention); the run that
    holds `keep_from` and events before it is rewritten from `keep_from` on."""
    straddling = conn.execute(
        "SELECT first, events, agent, agents, ends, frames FROM event_runs"
        " WHERE first < ? ORDER BY first DESC LIMIT 1",
        (keep_from,),
    ).fetchone()
    conn.execute("DELETE FROM event_runs WHERE first < ?", (keep_from,))
    if straddling is not None and straddling[0] + straddling[1] > keep_from:
        kept = entries_of(straddling)[keep_from - straddling[0] :]
        conn.executemany(INSERT, runs_of(kept))


CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS event_runs (
    first INTEGER PRIMARY KEY,
    events INTEGER NOT NULL,
    agent TEXT,
    agents TEXT,
    ends TEXT,
    frames BLOB NOT NULL
)
"""


# One aligned range of `events` as a run, in SQLite: the window's order is the rows' order
# into the aggregates (revision order), so the frames, agents and ends line up.
_RANGE_AS_RUN = """
INSERT INTO event_runs (first, events, agent, agents, ends, frames)
SELECT first, n, CASE WHEN low = high THEN low END, CASE WHEN low <> high THEN agents END,
    CASE WHEN n > 1 THEN ends END, frames
FROM (
    SELECT min(revision) AS first, count(*) AS n, min(agent_id) AS low, max(agent_id) AS high,
        json_group_array(agent_id) AS agents, json_group_array(e) AS ends,
        CAST(group_concat(event, '') AS BLOB) AS frames
    FROM (
        SELECT revision, agent_id, event, sum(length(event)) OVER (ORDER BY revision) AS e
        FROM events WHERE revision BETWEEN ? AND ?
    )
)
WHERE n > 0
"""


def events_as_runs(conn: sqlite3.Connection) -> None:
    """The migration: the log's rows of one event each become runs, one per aligned range of
    RUN_EVENTS (the old table kept no commits), each made by SQLite; a range over
    RUN_MAX_BYTES is cut in Python. Re-runnable: a database already migrated has no `events`
    table."""
    conn.execute(CREATE_TABLE)
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone() is None:
        return
    low, high = conn.execute("SELECT min(revision), max(revision) FROM events").fetchone()
    if high is not None:
        big = {
            start
            for (start,) in conn.execute(
                f"SELECT min(revision) FROM events GROUP BY (revision - 1) / {RUN_EVENTS}"
                f" HAVING sum(length(event)) > {RUN_MAX_BYTES}"
            )
        }
        ranges = _ranges(low, high)
        conn.executemany(_RANGE_AS_RUN, [r for r in ranges if r[0] not in big])
        for start, end in ranges:
            if start in big:
                rows = conn.execute(
                    "SELECT revision, agent_id, event FROM events WHERE revision BETWEEN ? AND ?",
                    (start, end),
                )
                conn.executemany(INSERT, runs_of([LogEntry(*row) for row in rows]))
    conn.execute("DROP TABLE events")


def _ranges(low: int, high: int) -> list[tuple[int, int]]:
    """The aligned ranges of RUN_EVENTS revisions from `low`'s to `high`'s (the first from
    `low` itself)."""
    aligned = low - (low - 1) % RUN_EVENTS
    return [
        (max(low, start), start + RUN_EVENTS - 1) for start in range(aligned, high + 1, RUN_EVENTS)
    ]
