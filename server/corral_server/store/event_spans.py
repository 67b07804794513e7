"""The event log's stored spans (the `event_spans` table): the writer's half, and the
migration that fills the table from a log written before it.

Why: a subscriber catching up from the log reads it as spans (store/log_spans.py). Joined at
read time, a span costs SQLite a step and a copy per event; stored joined, it is one row read
per STORED_SPAN_EVENTS events. So each commit also stores, beside the events, every aligned
span of STORED_SPAN_EVENTS events (`first - 1` a multiple of it) that the commit completes:
its events' frames joined and their agents. A span whose frames weigh more than
STORED_SPAN_MAX_BYTES is not stored (it is joined at read time, as before, or read entry by
entry when one of its events is large).

What the table holds is always a copy of what `events` holds: a span is stored only once all
its events are, in the same transaction; retention deletes every span it cuts into with the
events (event_log.py); the log's readers use a stored span only where it covers a whole range
they want, and join the rest from `events`.

Must not: run on the event loop, or hold more than one span's events between commits.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from operator import attrgetter

from corral_server.records.store import LogEntry

STORED_SPAN_EVENTS = 64
STORED_SPAN_MAX_BYTES = 64 << 10

SpanRow = tuple[int, str | None, str | None, bytes]
"""event_spans' columns: first revision, its one agent (None: several), each event's agent as
a JSON array (None: one), the frames joined."""

_INSERT = "INSERT INTO event_spans (first, agent, agents, frames) VALUES (?, ?, ?, ?)"
_AGENT = attrgetter("agent_id")
_EVENT = attrgetter("event")


def span_rows(
    tail: Sequence[LogEntry], entries: Sequence[LogEntry]
) -> tuple[list[SpanRow], tuple[LogEntry, ...]]:
    """The stored spans that `entries` (contiguous, the next after `tail`) complete, and the
    new tail. A tail is the committed events of the span the log's head is in, when that span
    is not complete (none when the head ends a span)."""
    run = [*tail, *entries]
    size = STORED_SPAN_EVENTS
    start = -(run[0].revision - 1) % size  # the first event that begins a span
    rows: list[SpanRow] = []
    while start + size <= len(run):
        rows.extend(_row(run[start : start + size]))
        start += size
    keep = run[-1].revision % size
    return rows, tuple(run[-keep:]) if keep else ()


def _row(span: list[LogEntry]) -> list[SpanRow]:
    frames = b"".join(map(_EVENT, span))
    if len(frames) > STORED_SPAN_MAX_BYTES:
        return []
    agents = list(map(_AGENT, span))
    if agents.count(agents[0]) == len(agents):
        return [(span[0].revision, agents[0], None, frames)]
    return [(span[0].revision, None, json.dumps(agents, separators=(",", ":")), frames)]


def store_spans(conn: sqlite3.Connection, rows: list[SpanRow]) -> None:
    """In the writer thread, in the commit's transaction."""
    if rows:
        conn.executemany(_INSERT, rows)


def trim_spans(conn: sqlite3.Connection, keep_from: int) -> None:
    """In the writer thread: retention dropped the events before `keep_from`; every span
    that held one of them goes too."""
    conn.execute("DELETE FROM event_spans WHERE first < ?", (keep_from,))


def load_tail(conn: sqlite3.Connection, head: int) -> tuple[LogEntry, ...]:
    """In a reader thread at open: the committed events of the head's incomplete span."""
    rows = conn.execute(
        "SELECT revision, agent_id, event FROM events WHERE revision > ? ORDER BY revision",
        (head - head % STORED_SPAN_EVENTS,),
    )
    return tuple(LogEntry(*row) for row in rows)


CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS event_spans (
    first INTEGER PRIMARY KEY,
    agent TEXT,
    agents TEXT,
    frames BLOB NOT NULL
)
"""

# One aligned range of `events` as a span row, when it is whole and small enough. The order of
# the joins is a rowid range scan's (log_spans.py relies on it the same way).
_BACKFILL = f"""
INSERT OR IGNORE INTO event_spans (first, agent, agents, frames)
SELECT first, CASE WHEN low = high THEN low END, CASE WHEN low <> high THEN agents END, frames
FROM (
    SELECT min(revision) AS first, count(*) AS n, sum(length(event)) AS size,
        min(agent_id) AS low, max(agent_id) AS high, json_group_array(agent_id) AS agents,
        CAST(group_concat(event, '') AS BLOB) AS frames
    FROM events WHERE revision BETWEEN ? AND ?
)
WHERE n = {STORED_SPAN_EVENTS} AND size <= {STORED_SPAN_MAX_BYTES}
"""


def add_event_spans(conn: sqlite3.Connection) -> None:
    """The migration: the table, and a stored span for every whole aligned span the log
    holds already (one statement per span, all in SQLite). Re-runnable."""
    conn.execute(CREATE_TABLE)
    low, high = conn.execute("SELECT min(revision), max(revision) FROM events").fetchone()
    if high is None:
        return
    size = STORED_SPAN_EVENTS
    first = low + (-(low - 1) % size)
    conn.executemany(
        _BACKFILL, ((start, start + size - 1) for start in range(first, high - size + 2, size))
    )
