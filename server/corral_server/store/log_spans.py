"""The event log read as spans (records/store.py `LogSpan`): the reader thread's half of
`SqliteEventLog.read_spans`, for subscribers catching up from the log.

Why spans: the log stores each event as its frame, so a run of events is sent as the join of
their stored bytes. Read a row at a time, the sqlite3 module builds four Python objects per
row and takes the GIL back after every row's step, while the event loop needs it to send:
replaying from the log then ran at a third of the ring's rate. Here SQLite joins each
span's frames itself (`group_concat` over a rowid range, inside one step, without the
GIL), so a chunk of 2,048 events costs a few dozen rows of Python work.

One read is one transaction (one snapshot) of one or two statements over the same ranges:
  spans   per span: first revision, count, bytes, least and greatest agent id, and its
          frames joined; fetched span by span, and no further once past `max_bytes`
  agents  per span of more than one agent: its agent ids, in revision order (JSON)
An event over `max_bytes / span_events` is left out of its span's join (so no span's join
exceeds `max_bytes`, even for rows of up to 2 MiB each); a span that lost one to it, and
all that follows in this read, is read entry by entry instead (`fallback`): large events,
whose per-row cost is small beside their size.

The order within a span relies on SQLite aggregating a rowid range scan in rowid order
(`revision` is the table's INTEGER PRIMARY KEY): the only plan for these statements.
The text-to-blob cast keeps the bytes as they are in a UTF-8 database (schema.py creates
it so).

Must not: run on the event loop, or write.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from functools import cache

from corral_server.records.store import LogEntry, LogSpan, spans_of
from corral_server.store.event_spans import STORED_SPAN_EVENTS

_RANGE = "FROM events WHERE revision BETWEEN ? AND ?"


@cache
def _statement(columns: str, spans: int) -> str:
    """One SELECT of `columns` per span range, in order."""
    return " UNION ALL ".join([f"SELECT {columns} {_RANGE}"] * spans)


_SPANS = (
    "min(revision), count(*), sum(length(event)), min(agent_id), max(agent_id),"
    " CAST(group_concat(CASE WHEN length(event) <= ? THEN event END, '') AS BLOB)"
)
_AGENTS = "json_group_array(agent_id)"
# The stored spans of a read in ONE row (one step): the reader thread takes the GIL back
# after every step, and while the loop is sending, each take can wait out the loop's switch
# interval (5 ms): a step per span cost a read of 2,048 events 20-200 ms of waiting.
_STORED = (
    "SELECT json_group_array(first), json_group_array(agent), json_group_array(json(agents)),"
    " json_group_array(length(frames)), CAST(group_concat(frames, '') AS BLOB)"
    " FROM event_spans WHERE first BETWEEN ? AND ?"
)

Fallback = Callable[[sqlite3.Connection, int, int, int], list[LogEntry]]
"""(conn, after, limit, max_bytes) -> the entries a per-row read returns."""


def ranges(low: int, limit: int, span_events: int) -> list[tuple[int, int]]:
    """The revision ranges of the spans after `low`, `limit` revisions in all, cut where
    `first - 1` is a multiple of `span_events`."""
    out: list[tuple[int, int]] = []
    first, last = low + 1, low + limit
    while first <= last:
        end = min(last, first + span_events - 1 - (first - 1) % span_events)
        out.append((first, end))
        first = end + 1
    return out


def read_spans(
    conn: sqlite3.Connection,
    after: int,
    limits: tuple[int, int, int],
    fallback: Fallback,
) -> list[LogSpan]:
    """In the reader thread: the retained events after `after` (from the earliest retained
    one when `after` is older) as spans; `limits` are (events, bytes, events per span): at
    most that many events and bytes in all (one event at least)."""
    limit, max_bytes, span_events = limits
    conn.execute("BEGIN")
    try:
        earliest = conn.execute("SELECT min(revision) FROM events").fetchone()[0]
        if earliest is None:
            return []
        low = max(after, earliest - 1)
        wanted = ranges(low, limit, span_events)
        cap = max(1, max_bytes // span_events)
        taken, rest = _joined(_rows(conn, wanted, cap), max_bytes)
        spans = _named(conn, taken)
        if rest is not None:
            budget = max_bytes - sum(len(span.frames) for span in spans)
            if not spans or budget > 0:
                first = rest - 1
                left = budget if spans else max_bytes
                entries = fallback(conn, first, low + limit - first, left)
                if spans and entries and len(entries[0].event) > budget:
                    entries = []  # one event at least only when nothing else was read
                spans += spans_of(entries, span_events)
    finally:
        conn.execute("COMMIT")
    return spans


_Row = tuple[int, int, int, str | None, str | None, bytes | None, list[str] | None]
"""A span as read: first revision, count, bytes, least and greatest agent id, frames joined
(without any event over the cap), and each event's agent when stored so (else None)."""
_Joined = tuple[int, int, bytes, str | None, str | None, list[str] | None]


def _rows(conn: sqlite3.Connection, wanted: list[tuple[int, int]], cap: int) -> Iterator[_Row]:
    """The spans of `wanted` in order, each from `event_spans` where it is stored whole
    (store/event_spans.py), else joined from `events` (fetched as they are used)."""
    stored = _stored(conn, wanted)
    missing = [span for span in wanted if span[0] not in stored]
    joined = _select(conn, _SPANS, missing, cap) if missing else None
    try:
        for first, _ in wanted:
            row = stored.get(first)
            if row is None:
                assert joined is not None
                row = (*next(joined), None)
            yield row
    finally:
        if joined is not None:
            joined.close()


def _stored(conn: sqlite3.Connection, wanted: list[tuple[int, int]]) -> dict[int, _Row]:
    """The stored spans among `wanted`'s whole ranges, by first revision."""
    whole = [first for first, last in wanted if last - first + 1 == STORED_SPAN_EVENTS]
    if not whole:
        return {}
    firsts, one, each, lengths, frames = conn.execute(_STORED, (whole[0], whole[-1])).fetchone()
    found: dict[int, _Row] = {}
    at = 0
    columns = (json.loads(firsts), json.loads(one), json.loads(each), json.loads(lengths))
    for first, agent, agents, length in zip(*columns, strict=True):
        found[first] = (
            first,
            STORED_SPAN_EVENTS,
            length,
            agent,
            agent,
            frames[at : at + length],
            agents,
        )
        at += length
    return found


def _joined(rows: Iterator[_Row], max_bytes: int) -> tuple[list[_Joined], int | None]:
    """The spans that fit `max_bytes`, fetched one at a time, and the first revision to read
    entry by entry (None: none)."""
    taken: list[_Joined] = []
    budget = max_bytes
    rest = None
    for first, count, size, low, high, frames, agents in rows:
        if not count:
            break  # past the head
        if len(frames or b"") != size:  # an event over the cap was left out of the join
            rest = first
            break
        budget -= size
        if budget < 0:
            if not taken:  # only with a budget under `span_events` bytes
                rest = first
            break
        assert frames is not None  # a span with events (size checked above)
        taken.append((first, count, frames, low, high, agents))
    return taken, rest


def _named(conn: sqlite3.Connection, taken: list[_Joined]) -> list[LogSpan]:
    """The spans, with the agent of each event where they have several."""
    mixed = [
        (first, first + count - 1)
        for first, count, _, low, high, stored in taken
        if stored is None and low != high
    ]
    agents = iter(_select(conn, _AGENTS, mixed).fetchall() if mixed else ())
    spans: list[LogSpan] = []
    for first, count, frames, low, high, stored in taken:
        each: str | tuple[str, ...]
        if stored is not None:
            each = tuple(stored)
        elif low == high:
            assert low is not None
            each = low
        else:
            each = tuple(json.loads(next(agents)[0]))
        spans.append(LogSpan(first, count, frames, each))
    return spans


def _select(
    conn: sqlite3.Connection, columns: str, spans: list[tuple[int, int]], *head: int
) -> sqlite3.Cursor:
    """One SELECT of `columns` per span, in order (`head`: the parameters before each
    span's bounds)."""
    bounds = [value for span in spans for value in (*head, *span)]
    return conn.execute(_statement(columns, len(spans)), bounds)
