"""The timeline tables (`timelines`, `timeline_rows`; store/schema.py), in the database's threads:
the writer's half (the queued writes of one commit, in queue order, in its transaction; the rows
packed into one statement by store/packed_rows.py) and the reader's (every head at open; one
page, head and rows from one snapshot). sqlite_timeline.py owns the loop's half: the heads in
memory and the queue.

Must not: run on the loop, or import protobuf or grpc (items arrive encoded, and are decoded
by the injected codec).
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
from collections.abc import Callable
from typing import Any, NamedTuple

from corral_server.domain.timeline import Cursor, Direction, FetchResult, TimelineRow
from corral_server.errors import AgentNotFound
from corral_server.store import search, tool_outputs
from corral_server.store.errors import StoreError
from corral_server.store.packed_rows import RowBatch, insert_rows
from corral_server.timeline import pages
from corral_server.timeline.size import row_bytes


class Head(NamedTuple):
    """A timeline's head. Invariant: its rows in timeline_rows are exactly
    (timeline_id, first .. next_seq - 1); `first` == next_seq when none is retained."""

    timeline_id: int
    epoch: str
    next_seq: int
    first: int


class Kind(enum.Enum):
    CREATE = 1
    APPEND = 2
    REBASE = 3
    SET_PROVIDER_MESSAGE_ID = 4
    DROP = 5


class Op(NamedTuple):
    """One queued write. `after` is the head once it commits (None: dropped); `before` the
    head it was computed from (None: created)."""

    kind: Kind
    agent_id: str
    before: Head | None
    after: Head | None
    # APPEND: (its RowBatch, OutputWrites, the NewRows when the index is on);
    # SET_PROVIDER_MESSAGE_ID: (seq, id)
    payload: Any
    result: Any  # what the future resolves to
    future: asyncio.Future[Any]


# --- the writer thread's half ----------------------------------------------------------------

_UPDATE_HEAD = "UPDATE timelines SET next_seq = ?, first_seq = ? WHERE agent_id = ?"
_TRIM_ROWS = "DELETE FROM timeline_rows WHERE timeline_id = ? AND seq < ?"
_DELETE_ROWS = "DELETE FROM timeline_rows WHERE timeline_id = ?"


def write(ops: list[Op], index: bool, conn: sqlite3.Connection) -> None:
    """Runs in the writer thread, inside its transaction. Consecutive appends (the hot path)
    become one packed insert of rows and one executemany of heads; any other write flushes
    them first, so the database sees every write in queue order."""
    rows: list[RowBatch] = []
    outputs: list[tool_outputs.OutputWrite] = []  # the appended rows' kept tool outputs
    texts: list[tuple[Any, ...]] = []  # the appended rows' full-text index entries
    heads: dict[str, tuple[Head, Head]] = {}  # agent -> (head before its first append, after)
    for op in ops:
        if op.kind is Kind.APPEND:
            rows.append(op.payload[0])
            outputs.extend(op.payload[1])
            assert op.before is not None and op.after is not None
            if index:
                texts.extend(
                    search.entries(op.after.timeline_id, op.before.next_seq, op.payload[2])
                )
            earliest = heads[op.agent_id][0] if op.agent_id in heads else op.before
            heads[op.agent_id] = (earliest, op.after)
            continue
        _write_appends(conn, rows, texts, heads)
        tool_outputs.write(conn, outputs)
        rows, outputs, texts, heads = [], [], [], {}
        _write_other(conn, op)
    _write_appends(conn, rows, texts, heads)
    tool_outputs.write(conn, outputs)


def _write_appends(
    conn: sqlite3.Connection,
    rows: list[RowBatch],
    texts: list[tuple[Any, ...]],
    heads: dict[str, tuple[Head, Head]],
) -> None:
    if not rows:
        return
    insert_rows(conn, rows)
    search.insert(conn, texts)  # same transaction: a committed row is findable
    conn.executemany(
        _UPDATE_HEAD, [(after.next_seq, after.first, agent) for agent, (_, after) in heads.items()]
    )
    trims = [
        (after.timeline_id, after.first)
        for before, after in heads.values()
        if after.first > before.first
    ]
    if trims:
        conn.executemany(_TRIM_ROWS, trims)
        search.trim(conn, trims)
        tool_outputs.trim(conn, trims)


def _write_other(conn: sqlite3.Connection, op: Op) -> None:
    match op.kind:
        case Kind.CREATE:
            assert op.after is not None
            conn.execute(
                "INSERT INTO timelines (agent_id, timeline_id, epoch, next_seq, first_seq)"
                " VALUES (?, ?, ?, ?, ?)",
                (op.agent_id, op.after.timeline_id, op.after.epoch, 1, 1),
            )
        case Kind.REBASE:
            assert op.before is not None and op.after is not None
            conn.execute(_DELETE_ROWS, (op.before.timeline_id,))
            search.delete_timeline(conn, op.before.timeline_id)
            tool_outputs.sweep_outputs(conn)  # the old epoch's stay, for a rewind's copies
            conn.execute(
                "UPDATE timelines SET timeline_id = ?, epoch = ?, next_seq = 1, first_seq = 1"
                " WHERE agent_id = ?",
                (op.after.timeline_id, op.after.epoch, op.agent_id),
            )
        case Kind.SET_PROVIDER_MESSAGE_ID:
            assert op.after is not None
            seq, provider_message_id = op.payload
            conn.execute(
                "UPDATE timeline_rows SET provider_message_id = ?"
                " WHERE timeline_id = ? AND seq = ?",
                (provider_message_id, op.after.timeline_id, seq),
            )
        case Kind.DROP:
            assert op.before is not None
            conn.execute(_DELETE_ROWS, (op.before.timeline_id,))
            search.delete_timeline(conn, op.before.timeline_id)
            conn.execute("DELETE FROM timelines WHERE agent_id = ?", (op.agent_id,))
            tool_outputs.sweep_outputs(conn)
        case Kind.APPEND:
            raise AssertionError("appends are written in batches")


# --- the reader thread's half ----------------------------------------------------------------


def load_heads(conn: sqlite3.Connection) -> tuple[dict[str, Head], int]:
    heads = {
        agent: Head(tid, epoch, next_seq, first)
        for agent, tid, epoch, next_seq, first in conn.execute(
            "SELECT agent_id, timeline_id, epoch, next_seq, first_seq FROM timelines"
        )
    }
    top = conn.execute("SELECT coalesce(max(timeline_id), 0) FROM timelines").fetchone()[0]
    return heads, int(top)


class PageRequest(NamedTuple):
    agent_id: str
    direction: Direction
    cursor: Cursor | None
    limit: int
    max_rows: int
    max_bytes: int
    decode: Callable[[bytes], Any]


_PAGE_NEWEST = (
    "SELECT seq, timestamp_ms, turn_id, provider_message_id, item FROM timeline_rows"
    " WHERE timeline_id = ? AND seq >= ? AND seq < ? ORDER BY seq DESC LIMIT ?"
)
_PAGE_OLDEST = (
    "SELECT seq, timestamp_ms, turn_id, provider_message_id, item FROM timeline_rows"
    " WHERE timeline_id = ? AND seq >= ? AND seq < ? ORDER BY seq LIMIT ?"
)


def read_page(request: PageRequest, conn: sqlite3.Connection) -> FetchResult:
    """Runs in the reader thread: the head and the page's rows from one snapshot."""
    conn.execute("BEGIN")
    try:
        found = conn.execute(
            "SELECT timeline_id, epoch, next_seq, first_seq FROM timelines WHERE agent_id = ?",
            (request.agent_id,),
        ).fetchone()
        if found is None:
            raise AgentNotFound(request.agent_id)  # dropped since the loop looked
        head = Head(*found)
        where = pages.plan(
            head.epoch, head.first, head.next_seq, request.direction, request.cursor, request.limit
        )
        rows, size = _cut(conn, request, head, where)
    finally:
        conn.execute("COMMIT")
    return pages.receipt(head.epoch, head.first, head.next_seq, where, rows, size)


def _cut(
    conn: sqlite3.Connection, request: PageRequest, head: Head, where: pages.Plan
) -> tuple[list[TimelineRow], int]:
    """The plan's rows, cut to the page's rows and bytes from the plan's end: the rows that
    fit, always one at least, and what they weigh. Reads and decodes only the rows it keeps
    (and one more)."""
    wanted = min(where.hi - where.lo, request.max_rows)
    if wanted <= 0:
        return [], 0
    sql = _PAGE_NEWEST if where.newest else _PAGE_OLDEST
    decode = request.decode
    budget = request.max_bytes
    size = 0
    kept: list[TimelineRow] = []
    for seq, timestamp_ms, turn_id, provider_message_id, item in conn.execute(
        sql, (head.timeline_id, where.lo, where.hi, wanted)
    ):
        row = TimelineRow(seq, timestamp_ms, decode(item), turn_id, provider_message_id)
        weight = row_bytes(row)
        budget -= weight
        if budget < 0 and kept:
            break
        kept.append(row)
        size += weight
    else:
        if len(kept) != wanted:
            raise StoreError(
                f"timeline of agent {request.agent_id!r} misses rows in {where.lo}..{where.hi - 1}"
            )
    if where.newest:
        kept.reverse()
    return kept, size
