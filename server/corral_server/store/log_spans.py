"""The event log read as spans (records/store.py `LogSpan`): the reader thread's half of
`SqliteEventLog.read_spans`, for subscribers catching up from the log.

The log stores its events as runs, frames joined (store/event_runs.py), aligned as spans
are: after a burst a span is one run, read as it was written. A read is one transaction of
three statements, each answered in ONE row (so one step: the reader thread takes the GIL back
after every step, and while the loop sends, each take can wait out the loop's switch interval
of 5 ms; a step per row cost a read of 2,048 events 20-200 ms of waiting):

  earliest  the first retained revision
  runs      per run that holds a wanted event: first, events, agent(s), frame ends, bytes
            (json_group_array over a rowid range scan, in rowid order: `first` is the
            INTEGER PRIMARY KEY)
  frames    the frames of the runs the byte budget takes, a column each (up to _COLUMNS
            runs a statement), so a run taken whole is the very bytes SQLite returned

Then the runs are cut into spans where a span boundary, the read's start and end, or its
byte budget falls inside one; a span of several runs (small commits) joins their pieces.

Must not: run on the event loop, or write.
"""

from __future__ import annotations

import json
import sqlite3
from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import cache, partial

from corral_server.records.store import LogSpan
from corral_server.store.event_runs import RUN_EVENTS

_RUNS = (
    "SELECT json_group_array(json_array(first, events, agent, agents, length(frames)))"
    " FROM event_runs WHERE first BETWEEN ? AND ?"
)
_ENDS = "SELECT ends FROM event_runs WHERE first = ?"


# Runs per frames statement (SQLite allows 2,000 columns; a burst's 2,048 events are 32 runs,
# and only commits of one event each make a read of more than a few hundred).
_COLUMNS = 256


@cache
def _frames(runs: int) -> str:
    """The frames of `runs` runs, one column each, in one row (no join to cut up again)."""
    return "SELECT " + ", ".join(["(SELECT frames FROM event_runs WHERE first = ?)"] * runs)


_Run = tuple[int, int, str | None, str | None, int]
"""A run as listed: first, events, its one agent, each event's agent (JSON), bytes."""


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
        firsts = [run[0] for run in runs]
        frames: list[bytes] = []
        for start in range(0, len(firsts), _COLUMNS):
            some = firsts[start : start + _COLUMNS]
            frames += conn.execute(_frames(len(some)), some).fetchone()
        spans = _Spans(span_events, partial(_ends, conn))
        return spans.cut(runs, frames, low, low + limit, max_bytes)
    finally:
        conn.execute("COMMIT")


def _ends(conn: sqlite3.Connection, first: int, count: int, size: int) -> list[int]:
    """Where each event of a run starts in its frames, and where the last ends: read only
    for a run cut into (none of a burst's, read whole)."""
    if count == 1:
        return [0, size]
    return [0, *json.loads(conn.execute(_ENDS, (first,)).fetchone()[0])]


def _within(runs: list[_Run], low: int, max_bytes: int) -> list[_Run]:
    """The runs up to the one the byte budget ends in, and one more (a run the read starts
    inside counts whole here)."""
    budget = max_bytes
    for index, (first, count, _, _, size) in enumerate(runs):
        if first + count - 1 <= low:
            continue
        budget -= size
        if budget < 0:
            return runs[: index + 2]
    return runs


class _Spans:
    """Spans built piece by piece: a piece is the events of one run within one span."""

    def __init__(self, span_events: int, ends: Callable[[int, int, int], list[int]]) -> None:
        self._size = span_events
        self._ends = ends
        self._spans: list[LogSpan] = []
        self._first = 0  # the span being built: its first revision (0: none)
        self._parts: list[bytes] = []
        self._agents: list[tuple[int, str | list[str]]] = []  # per piece: events, agent(s)

    def cut(
        self, runs: list[_Run], frames: Sequence[bytes], low: int, high: int, max_bytes: int
    ) -> list[LogSpan]:
        """The events low + 1 .. high of `runs` (whose frames are `frames`, run by run) as
        spans, within `max_bytes` (one event at least)."""
        budget = max_bytes
        for (first, count, agent, agents, size), run_frames in zip(runs, frames, strict=True):
            index, stop = max(0, low + 1 - first), min(count, high - first + 1)
            at: list[int] = []
            each: list[str] = []
            while index < stop:
                revision = first + index
                end = min(stop, index + self._size - (revision - 1) % self._size)
                if index == 0 and end == count and size <= budget:
                    fit, piece = count, run_frames  # a run taken whole, as stored
                else:
                    at = at or self._ends(first, count, size)
                    fit = bisect_right(at, at[index] + budget, index + 1, end + 1) - 1
                    if fit == index:
                        if self._spans or self._first:
                            return self._done()
                        fit = index + 1  # one event at least, whatever its size
                    piece = run_frames[at[index] : at[fit]]
                budget -= len(piece)
                if agent is None:
                    each = each or json.loads(agents or "[]")
                self._add(revision, fit - index, piece, agent or each[index:fit])
                if fit < end:
                    return self._done()
                index = fit
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
