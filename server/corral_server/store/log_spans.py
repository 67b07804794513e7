"""The event log read as spans (records/store.py `LogSpan`): the reader thread's half of
`SqliteEventLog.read_spans`, for subscribers catching up from the log.

The log stores its events as runs, frames joined (store/event_runs.py), aligned as spans
are: after a burst a span is one run, read as it was written. A read is one transaction of
three statements, each answered in ONE row (so one step: the reader thread takes the GIL back
after every step, and while the loop sends, each take can wait out the loop's switch interval
of 5 ms; a step per row cost a read of 2,048 events 20-200 ms of waiting):

  earliest  the first retained revision
  runs      per run that holds a wanted event: first, events, agent(s), frame ends, bytes
  frames    the frames of the runs the byte budget takes, joined (group_concat over a rowid
            range scan is in rowid order, `first` being the INTEGER PRIMARY KEY; the
            text-to-blob cast keeps the bytes of a UTF-8 database as they are)

Then the runs are cut into spans where a span boundary, the read's start and end, or its
byte budget falls inside one; a span of several runs (small commits) joins their pieces.

Must not: run on the event loop, or write.
"""

from __future__ import annotations

import json
import sqlite3
from bisect import bisect_right

from corral_server.records.store import LogSpan
from corral_server.store.event_runs import RUN_EVENTS

_RUNS = (
    "SELECT json_group_array(json_array(first, events, agent, json(agents), json(ends),"
    " length(frames))) FROM event_runs WHERE first BETWEEN ? AND ?"
)
_FRAMES = (
    "SELECT CAST(group_concat(frames, '') AS BLOB) FROM event_runs WHERE first BETWEEN ? AND ?"
)

_Run = tuple[int, int, str | None, list[str] | None, list[int] | None, int]
"""A run as listed: first, events, its one agent, each event's agent, frame ends, bytes."""


def read_spans(conn: sqlite3.Connection, after: int, limits: tuple[int, int, int]) -> list[LogSpan]:
    """In the reader thread: the retained events after `after` (from the earliest retained
    one when `after` is older) as spans; `limits` are (events, bytes, events per span): at
    most that many events and bytes in all (one event at least)."""
    limit, max_bytes, span_events = limits
    conn.execute("BEGIN")
    try:
        earliest = conn.execute("SELECT min(first) FROM event_runs").fetchone()[0]
        if earliest is None:
            return []
        low = max(after, earliest - 1)
        bounds = (low - low % RUN_EVENTS + 1, low + limit)  # a run never crosses a boundary
        listed: list[_Run] = json.loads(conn.execute(_RUNS, bounds).fetchone()[0])
        runs = _within(listed, low, max_bytes)
        if not runs:
            return []
        frames = conn.execute(_FRAMES, (bounds[0], runs[-1][0])).fetchone()[0]
    finally:
        conn.execute("COMMIT")
    return _Spans(span_events).cut(runs, frames, low, low + limit, max_bytes)


def _within(runs: list[_Run], low: int, max_bytes: int) -> list[_Run]:
    """The runs up to the one the byte budget ends in (counting only events after `low`)."""
    budget = max_bytes
    for index, (first, count, _, _, ends, size) in enumerate(runs):
        if first + count - 1 <= low:
            continue
        skipped = low - first + 1
        if skipped > 0:
            assert ends is not None  # a run of one event is never cut into
            size -= ends[skipped - 1]
        budget -= size
        if budget < 0:
            return runs[: index + 1]
    return runs


class _Spans:
    """Spans built piece by piece: a piece is the events of one run within one span."""

    def __init__(self, span_events: int) -> None:
        self._size = span_events
        self._spans: list[LogSpan] = []
        self._first = 0  # the span being built: its first revision (0: none)
        self._parts: list[bytes] = []
        self._agents: list[tuple[int, str | list[str]]] = []  # per piece: events, agent(s)

    def cut(
        self, runs: list[_Run], frames: bytes, low: int, high: int, max_bytes: int
    ) -> list[LogSpan]:
        """The events low + 1 .. high of `runs` (whose frames are `frames`, joined) as
        spans, within `max_bytes` (one event at least)."""
        budget = max_bytes
        base = 0  # where the run's frames start in `frames`
        for first, count, agent, agents, ends, size in runs:
            at = [0, *(ends or [size])]
            index, stop = max(0, low + 1 - first), min(count, high - first + 1)
            while index < stop:
                revision = first + index
                end = min(stop, index + self._size - (revision - 1) % self._size)
                fit = bisect_right(at, at[index] + budget, index + 1, end + 1) - 1
                if fit == index:
                    if self._spans or self._first:
                        return self._done()
                    fit = index + 1  # one event at least, whatever its size
                piece = frames[base + at[index] : base + at[fit]]
                budget -= len(piece)
                who = agent if agent is not None else (agents or [])[index:fit]
                self._add(revision, fit - index, piece, who)
                if fit < end:
                    return self._done()
                index = fit
            base += size
        return self._done()

    def _add(self, revision: int, count: int, piece: bytes, agents: str | list[str]) -> None:
        if self._first and (revision - 1) // self._size != (self._first - 1) // self._size:
            self._flush()
        if not self._first:
            self._first = revision
        self._parts.append(piece)
        self._agents.append((count, agents))

    def _flush(self) -> None:
        parts, agents = self._parts, self._agents
        frames = parts[0] if len(parts) == 1 else b"".join(parts)
        one = agents[0][1]
        each: str | tuple[str, ...]
        if isinstance(one, str) and all(who == one for _, who in agents):
            each = one
        else:
            names = tuple(
                name
                for count, who in agents
                for name in ([who] * count if isinstance(who, str) else who)
            )
            each = names[0] if names.count(names[0]) == len(names) else names
        count = sum(n for n, _ in agents)
        self._spans.append(LogSpan(self._first, count, frames, each))
        self._first = 0
        self._parts, self._agents = [], []

    def _done(self) -> list[LogSpan]:
        if self._first:
            self._flush()
        return self._spans
