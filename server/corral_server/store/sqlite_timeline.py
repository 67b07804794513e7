"""The SQLite timeline store: the `TimelineStore` contract, durable (schema in store/schema.py).

Owns the timelines' heads in memory and the timeline tables on disk. Every write is queued on
the loop and group committed: writes queued while a commit is in flight (from any agent) go
to the database as ONE job in the next transaction, so a burst costs one fsync per commit,
not per row, and a future resolves only once its rows are durable.

Two views of each head, both in memory:
  * `_committed`: what the database holds. `head()` and the agent check of `fetch` read it;
    each commit's callback advances it before any of the commit's futures resolves.
  * `_reserved`: `_committed` plus every queued write. Writes take their seqs, epochs and
    timeline ids from it, on the loop, at call time: the single writer knows a row's seq
    before the row is durable, and pipelined appends stay contiguous.
A failed commit fails its writes and every write queued behind it (their seqs were taken
after the failed ones), and `_reserved` returns to `_committed`: no gap, no half-written row.

Reads run in the database's reader thread, the head and the rows from one snapshot, so a page
never mixes epochs nor misses rows that retention dropped meanwhile. Items are encoded on the
loop (a codec error fails the call, not the commit) and decoded in the reader thread.

Must not: import protobuf or grpc (the codec is injected), or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from corral_server.domain.timeline import (
    MAX_PAGE_BYTES,
    MAX_PAGE_ROWS,
    Cursor,
    Direction,
    FetchResult,
    TimelineHead,
    TimelineRow,
)
from corral_server.errors import AgentNotFound
from corral_server.store import pages, search
from corral_server.store.commits import GroupCommit, Job
from corral_server.store.database import Database
from corral_server.store.errors import StoreError
from corral_server.timeline.size import row_bytes
from corral_server.timeline.store import ItemCodec, NewRow, check_options, new_epoch

if TYPE_CHECKING:
    from corral_server.timeline.store import TimelineStore


class _Head(NamedTuple):
    """A timeline's head. Invariant: its rows in timeline_rows are exactly
    (timeline_id, first .. next_seq - 1); `first` == next_seq when none is retained."""

    timeline_id: int
    epoch: str
    next_seq: int
    first: int


class _Kind(enum.Enum):
    CREATE = 1
    APPEND = 2
    REBASE = 3
    SET_PROVIDER_MESSAGE_ID = 4
    DROP = 5


class _Op(NamedTuple):
    """One queued write. `after` is the head once it commits (None: dropped); `before` the
    head it was computed from (None: created)."""

    kind: _Kind
    agent_id: str
    before: _Head | None
    after: _Head | None
    payload: Any  # APPEND: row tuples; SET_PROVIDER_MESSAGE_ID: (seq, id); else None
    result: Any  # what the future resolves to
    future: asyncio.Future[Any]


class SqliteTimelineStore:
    """A `TimelineStore` in the database. Open with `await SqliteTimelineStore.open(db, codec)`.
    The options are those of InMemoryTimelineStore: `retain_rows` caps the rows kept per
    agent, `epoch_factory` mints epochs, `max_page_rows` and `max_page_bytes` cap a page.
    `search_index` indexes each appended row in its transaction (store/search.py); off, an
    append computes no index entry at all, and opening marks the rows for a later start
    with the index on to index in the background."""

    def __init__(
        self,
        database: Database,
        codec: ItemCodec,
        *,
        retain_rows: int | None = None,
        epoch_factory: Callable[[], str] = new_epoch,
        max_page_rows: int = MAX_PAGE_ROWS,
        max_page_bytes: int = MAX_PAGE_BYTES,
        search_index: bool = False,
    ) -> None:
        check_options(retain_rows, max_page_rows, max_page_bytes)
        self._db = database
        self._codec = codec
        self._retain_rows = retain_rows
        self._epoch_factory = epoch_factory
        self._max_page_rows = max_page_rows
        self._max_page_bytes = max_page_bytes
        self._search_index = search_index
        self._committed: dict[str, _Head] = {}
        self._reserved: dict[str, _Head] = {}
        self._next_timeline_id = 1
        self._queued: list[_Op] = []  # waiting for the next commit
        # The database's group commit, shared with its other stores (store/commits.py).
        self._commits = GroupCommit(database, self._take)

    @classmethod
    async def open(
        cls, database: Database, codec: ItemCodec, **options: Any
    ) -> SqliteTimelineStore:
        """The store with every head loaded (one scan of the timelines table)."""
        store = cls(database, codec, **options)
        heads, top_id = await database.read(_load_heads)
        store._committed = heads
        store._reserved = dict(heads)
        store._next_timeline_id = top_id + 1
        if not store._search_index:
            await database.write(search.mark_unindexed)
        return store

    # --- writes: queued on the loop, committed together ----------------------------------

    async def create(self, agent_id: str) -> TimelineHead:
        """Create an empty timeline. Creating one that exists is a caller bug (ValueError)."""
        if agent_id in self._reserved:
            raise ValueError(f"agent {agent_id!r} already has a timeline")
        head = self._fresh_head()
        head_out: TimelineHead = await self._queue(
            _Kind.CREATE, agent_id, None, head, None, TimelineHead(head.epoch, 1)
        )
        return head_out

    async def append(self, agent_id: str, rows: Sequence[NewRow]) -> list[TimelineRow]:
        return await self.append_nowait(agent_id, rows)

    def append_nowait(
        self, agent_id: str, rows: Sequence[NewRow]
    ) -> asyncio.Future[list[TimelineRow]]:
        before = self._reserved_head(agent_id)
        if not rows:
            return _done([])
        encode = self._codec.encode
        seq, tid = before.next_seq, before.timeline_id
        stored: list[TimelineRow] = []
        tuples: list[tuple[Any, ...]] = []
        for row in rows:  # one pass: this is the writer's hot path
            item, timestamp_ms, turn_id, provider_message_id = row
            blob = encode(item)  # a codec error fails this call, before anything is queued
            stored.append(TimelineRow(seq, timestamp_ms, item, turn_id, provider_message_id))
            tuples.append((tid, seq, timestamp_ms, turn_id, provider_message_id, blob))
            seq += 1
        first = before.first
        if self._retain_rows is not None:
            first = max(first, seq - self._retain_rows)
        after = _Head(tid, before.epoch, seq, first)
        return self._queue(_Kind.APPEND, agent_id, before, after, tuples, stored)

    async def rebase(self, agent_id: str) -> TimelineHead:
        before = self._reserved_head(agent_id)
        after = self._fresh_head()
        head_out: TimelineHead = await self._queue(
            _Kind.REBASE, agent_id, before, after, None, TimelineHead(after.epoch, 1)
        )
        return head_out

    async def set_provider_message_id(
        self, agent_id: str, seq: int, provider_message_id: str
    ) -> None:
        """A seq outside the retained window is a no-op (dropped by retention or rebase)."""
        head = self._reserved_head(agent_id)
        if not head.first <= seq < head.next_seq:
            return
        payload = (seq, provider_message_id)
        await self._queue(_Kind.SET_PROVIDER_MESSAGE_ID, agent_id, head, head, payload, None)

    async def drop(self, agent_id: str) -> None:
        """Forget the timeline and delete its rows; dropping an unknown agent is a no-op."""
        before = self._reserved.get(agent_id)
        if before is not None:
            await self._queue(_Kind.DROP, agent_id, before, None, None, None)

    def _fresh_head(self) -> _Head:
        tid = self._next_timeline_id
        self._next_timeline_id += 1
        return _Head(tid, self._epoch_factory(), 1, 1)

    def _reserved_head(self, agent_id: str) -> _Head:
        try:
            return self._reserved[agent_id]
        except KeyError:
            raise AgentNotFound(agent_id) from None

    def _queue(
        self,
        kind: _Kind,
        agent_id: str,
        before: _Head | None,
        after: _Head | None,
        payload: Any,
        result: Any,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append(_Op(kind, agent_id, before, after, payload, result, future))
        if after is None:
            del self._reserved[agent_id]
        else:
            self._reserved[agent_id] = after
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if not self._queued:
            return None
        ops, self._queued = self._queued, []
        return Job(
            partial(_write, ops, self._search_index),
            partial(self._committed_ops, ops),
            partial(self._failed, ops),
        )

    def _committed_ops(self, ops: list[_Op], _: None) -> None:
        committed = self._committed
        for op in ops:
            if op.after is None:
                committed.pop(op.agent_id, None)
            else:
                committed[op.agent_id] = op.after
        for op in ops:
            if not op.future.done():
                op.future.set_result(op.result)

    def _failed(self, ops: list[_Op], error: BaseException) -> None:
        """The commit failed: so does every write queued behind it (their seqs were counted
        after the failed ones); the reserved heads return to what is committed."""
        failed, self._queued = ops + self._queued, []
        self._reserved = dict(self._committed)
        for op in failed:
            if not op.future.done():
                op.future.set_exception(error)

    # --- reads ----------------------------------------------------------------------------

    def head(self, agent_id: str) -> TimelineHead:
        """The committed head (KeyError when the agent has no committed timeline)."""
        head = self._committed[agent_id]
        return TimelineHead(head.epoch, head.next_seq)

    async def fetch(
        self,
        agent_id: str,
        direction: Direction,
        cursor: Cursor | None,
        limit: int | None,
    ) -> FetchResult:
        if agent_id not in self._committed:
            raise AgentNotFound(agent_id)
        take = pages.checked_limit(limit)
        pages.checked_cursor(direction, cursor)
        request = _PageRequest(
            agent_id,
            direction,
            cursor,
            take,
            self._max_page_rows,
            self._max_page_bytes,
            self._codec.decode,
        )
        return await self._db.read(partial(_read_page, request))


def _done(value: list[TimelineRow]) -> asyncio.Future[list[TimelineRow]]:
    future: asyncio.Future[list[TimelineRow]] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


# --- the writer thread's half ----------------------------------------------------------------

_INSERT_ROW = (
    "INSERT INTO timeline_rows (timeline_id, seq, timestamp_ms, turn_id, provider_message_id,"
    " item) VALUES (?, ?, ?, ?, ?, ?)"
)
_UPDATE_HEAD = "UPDATE timelines SET next_seq = ?, first_seq = ? WHERE agent_id = ?"
_TRIM_ROWS = "DELETE FROM timeline_rows WHERE timeline_id = ? AND seq < ?"
_DELETE_ROWS = "DELETE FROM timeline_rows WHERE timeline_id = ?"


def _write(ops: list[_Op], index: bool, conn: sqlite3.Connection) -> None:
    """Runs in the writer thread, inside its transaction. Consecutive appends (the hot path)
    become one executemany of rows and one of heads; any other write flushes them first, so
    the database sees every write in queue order."""
    rows: list[tuple[Any, ...]] = []
    texts: list[tuple[Any, ...]] = []  # the appended rows' full-text index entries
    heads: dict[str, tuple[_Head, _Head]] = {}  # agent -> (head before its first append, after)
    for op in ops:
        if op.kind is _Kind.APPEND:
            rows.extend(op.payload)
            assert op.before is not None and op.after is not None
            if index:
                texts.extend(search.entries(op.after.timeline_id, op.result))
            earliest = heads[op.agent_id][0] if op.agent_id in heads else op.before
            heads[op.agent_id] = (earliest, op.after)
            continue
        _write_appends(conn, rows, texts, heads)
        rows, texts, heads = [], [], {}
        _write_other(conn, op)
    _write_appends(conn, rows, texts, heads)


def _write_appends(
    conn: sqlite3.Connection,
    rows: list[tuple[Any, ...]],
    texts: list[tuple[Any, ...]],
    heads: dict[str, tuple[_Head, _Head]],
) -> None:
    if not rows:
        return
    conn.executemany(_INSERT_ROW, rows)
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


def _write_other(conn: sqlite3.Connection, op: _Op) -> None:
    match op.kind:
        case _Kind.CREATE:
            assert op.after is not None
            conn.execute(
                "INSERT INTO timelines (agent_id, timeline_id, epoch, next_seq, first_seq)"
                " VALUES (?, ?, ?, ?, ?)",
                (op.agent_id, op.after.timeline_id, op.after.epoch, 1, 1),
            )
        case _Kind.REBASE:
            assert op.before is not None and op.after is not None
            conn.execute(_DELETE_ROWS, (op.before.timeline_id,))
            search.delete_timeline(conn, op.before.timeline_id)
            conn.execute(
                "UPDATE timelines SET timeline_id = ?, epoch = ?, next_seq = 1, first_seq = 1"
                " WHERE agent_id = ?",
                (op.after.timeline_id, op.after.epoch, op.agent_id),
            )
        case _Kind.SET_PROVIDER_MESSAGE_ID:
            assert op.after is not None
            seq, provider_message_id = op.payload
            conn.execute(
                "UPDATE timeline_rows SET provider_message_id = ?"
                " WHERE timeline_id = ? AND seq = ?",
                (provider_message_id, op.after.timeline_id, seq),
            )
        case _Kind.DROP:
            assert op.before is not None
            conn.execute(_DELETE_ROWS, (op.before.timeline_id,))
            search.delete_timeline(conn, op.before.timeline_id)
            conn.execute("DELETE FROM timelines WHERE agent_id = ?", (op.agent_id,))
        case _Kind.APPEND:
            raise AssertionError("appends are written in batches")


# --- the reader thread's half ----------------------------------------------------------------


def _load_heads(conn: sqlite3.Connection) -> tuple[dict[str, _Head], int]:
    heads = {
        agent: _Head(tid, epoch, next_seq, first)
        for agent, tid, epoch, next_seq, first in conn.execute(
            "SELECT agent_id, timeline_id, epoch, next_seq, first_seq FROM timelines"
        )
    }
    top = conn.execute("SELECT coalesce(max(timeline_id), 0) FROM timelines").fetchone()[0]
    return heads, int(top)


class _PageRequest(NamedTuple):
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


def _read_page(request: _PageRequest, conn: sqlite3.Connection) -> FetchResult:
    """Runs in the reader thread: the head and the page's rows from one snapshot."""
    conn.execute("BEGIN")
    try:
        found = conn.execute(
            "SELECT timeline_id, epoch, next_seq, first_seq FROM timelines WHERE agent_id = ?",
            (request.agent_id,),
        ).fetchone()
        if found is None:
            raise AgentNotFound(request.agent_id)  # dropped since the loop looked
        head = _Head(*found)
        where = pages.plan(
            head.epoch, head.first, head.next_seq, request.direction, request.cursor, request.limit
        )
        rows = _cut(conn, request, head, where)
    finally:
        conn.execute("COMMIT")
    low = rows[0].seq if rows else where.lo
    high = rows[-1].seq + 1 if rows else where.hi
    return FetchResult(
        epoch=head.epoch,
        window=pages.window(head.first, head.next_seq),
        rows=tuple(rows),
        has_older=low > head.first,
        has_newer=high < head.next_seq,
        reset=where.stale_cursor or where.gap,
        stale_cursor=where.stale_cursor,
        gap=where.gap,
    )


def _cut(
    conn: sqlite3.Connection, request: _PageRequest, head: _Head, where: pages.Plan
) -> list[TimelineRow]:
    """The plan's rows, cut to the page's rows and bytes from the plan's end: the rows that
    fit, always one at least. Reads and decodes only the rows it keeps (and one more)."""
    wanted = min(where.hi - where.lo, request.max_rows)
    if wanted <= 0:
        return []
    sql = _PAGE_NEWEST if where.newest else _PAGE_OLDEST
    decode = request.decode
    budget = request.max_bytes
    kept: list[TimelineRow] = []
    for seq, timestamp_ms, turn_id, provider_message_id, item in conn.execute(
        sql, (head.timeline_id, where.lo, where.hi, wanted)
    ):
        row = TimelineRow(seq, timestamp_ms, decode(item), turn_id, provider_message_id)
        budget -= row_bytes(row)
        if budget < 0 and kept:
            break
        kept.append(row)
    else:
        if len(kept) != wanted:
            raise StoreError(
                f"timeline of agent {request.agent_id!r} misses rows in {where.lo}..{where.hi - 1}"
            )
    if where.newest:
        kept.reverse()
    return kept


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: SqliteTimelineStore) -> TimelineStore:
        return store  # mypy proves SqliteTimelineStore implements TimelineStore
