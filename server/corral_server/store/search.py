"""Full-text search over every timeline: the FTS5 table `timeline_text` (schema v5).

One index row per timeline row that has text (store/search_text.py says what text), keyed by
rowid = timeline_id * 2**32 + seq, so a timeline's index rows are one rowid range: a rebase
(rewind, rehydrate), a drop and a retention trim delete that range in the same transaction
that deletes the rows (store/sqlite_timeline.py calls the writer-side helpers here), and an
appended row is indexed in the transaction that appends it. A committed row is findable; a
dropped one is not.

A database from before v5 has rows that are not indexed yet: the migration leaves a cursor
in `meta` ('search_backfill' = "timeline_id seq", the last row looked at) and `Backfill`
indexes the rows after it, a bounded batch per write job (each its own small transaction
alongside the live writes), until none is left, then deletes the key. Rows appended meanwhile
are indexed at append; the backfill skips rows already in the index.

The index is on by default (`corral serve --no-search-index` turns it off): indexing in the
rows' transaction costs some of the durable write throughput (BENCHMARKS.md). A store opened
with it off indexes nothing and moves the cursor back to before the first row it may append
(`mark_unindexed`), so the next start with the index on backfills what was written meanwhile.

Searches run in the reader thread, ranked by bm25 a window of matches at a time (newest
first: docs/design.md#search), each hit with a snippet (store/search_snippets.py). Must not:
import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from corral_server.domain.timeline import Cursor, TimelineItem
from corral_server.errors import InvalidArgument
from corral_server.store import search_packed
from corral_server.store.database import Database
from corral_server.store.search_snippets import Snippets, clip
from corral_server.store.search_text import (
    ITEM_KINDS,
    MAX_INDEXED_CHARS,
    PLAIN_KINDS,
    kind_of,
    text_of,
)
from corral_server.timeline.store import NewRow

log = logging.getLogger(__name__)

BACKFILL_KEY = "search_backfill"
BACKFILL_BATCH = 2000

_SPAN = 1 << 32  # rowids of one timeline: [timeline_id * _SPAN, (timeline_id + 1) * _SPAN)

_DELETE_RANGE = "DELETE FROM timeline_text WHERE rowid >= ? AND rowid < ?"
_ITEM, _TIMESTAMP = itemgetter(0), itemgetter(1)  # NewRow's
_TEXT = attrgetter("text")


class SearchHit(NamedTuple):
    agent_id: str
    cursor: Cursor
    kind: str
    timestamp_ms: int
    snippet: str
    score: float  # bm25: lower is a better match


class SearchQuery(NamedTuple):
    """`agent_ids` None = every agent; `kinds` None = every kind; times in ms, end exclusive."""

    query: str
    agent_ids: frozenset[str] | None
    kinds: frozenset[str] | None
    start_ms: int | None
    end_ms: int | None
    offset: int
    limit: int


# --- the writer thread's half (called inside the timeline store's transaction) -----------


def entries(timeline_id: int, first: int, rows: Sequence[NewRow]) -> list[tuple[Any, ...]]:
    """The index rows of `rows`, appended from seq `first` on (those with no text have none).
    Taken from the rows as the caller handed them (no row objects built for it); a batch of
    the one-attribute kinds (a burst of assistant rows: the hot path) by C iterators."""
    if not rows:
        return []
    base = timeline_id * _SPAN + first
    items = list(map(_ITEM, rows))
    types = set(map(type, items))
    if not types <= PLAIN_KINDS:
        return _entries_each(base, items, rows)
    texts = list(map(_TEXT, items))
    if max(map(len, texts)) > MAX_INDEXED_CHARS:
        texts = [text[:MAX_INDEXED_CHARS] for text in texts]
    kinds = (
        repeat(ITEM_KINDS[types.pop()])
        if len(types) == 1
        else map(ITEM_KINDS.__getitem__, map(type, items))
    )
    # `kinds` may repeat without end: the range and the texts bound the zip.
    found = zip(range(base, base + len(items)), texts, kinds, map(_TIMESTAMP, rows), strict=False)
    return list(found) if all(texts) else list(compress(found, texts))


def _entries_each(
    base: int, items: list[TimelineItem], rows: Sequence[NewRow]
) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    append = out.append
    for offset, (item, row) in enumerate(zip(items, rows, strict=True)):
        if text := text_of(item):
            append((base + offset, text, ITEM_KINDS[type(item)], row.timestamp_ms))
    return out


def insert(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """One commit's entries, packed into one statement (store/search_packed.py), in rowid
    order: FTS5 writes its pending terms out as a new segment whenever a rowid is lower than
    the one before it."""
    if rows:
        rows.sort(key=itemgetter(0))
        search_packed.insert(conn, rows)


def delete_timeline(conn: sqlite3.Connection, timeline_id: int) -> None:
    conn.execute(_DELETE_RANGE, (timeline_id * _SPAN, (timeline_id + 1) * _SPAN))


def trim(conn: sqlite3.Connection, trims: list[tuple[int, int]]) -> None:
    """(timeline_id, first): drop the index rows of seqs below `first`."""
    conn.executemany(_DELETE_RANGE, [(tid * _SPAN, tid * _SPAN + first) for tid, first in trims])


def mark_unindexed(conn: sqlite3.Connection) -> None:
    """In the writer thread, as a store opens with the index off: the rows it appends go at
    (timeline, seq) positions after the cursor this sets (an existing timeline's from its
    next seq, a new one's with a higher id), unless an older cursor is lower still."""
    lowest = conn.execute(
        "SELECT timeline_id, next_seq - 1 FROM timelines ORDER BY timeline_id LIMIT 1"
    ).fetchone()
    cursor = (int(lowest[0]), int(lowest[1])) if lowest else (_top_timeline_id(conn) + 1, 0)
    if (pending := _backfill_cursor(conn)) is not None:
        cursor = min(cursor, _parse_cursor(pending))
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        (BACKFILL_KEY, f"{cursor[0]} {cursor[1]}"),
    )


def _top_timeline_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(timeline_id), 0) FROM timelines").fetchone()[0])


def _parse_cursor(text: str) -> tuple[int, int]:
    tid, seq = text.split()
    return int(tid), int(seq)


# --- the reader thread's half --------------------------------------------------------------

# Ranking reads only the index (the rowid, bm25 and, to scope by agent, the timelines
# table): the content columns and the snippet cost a content read per row, so they are read for
# the page's hits alone, each by its rowid. bm25 costs a few microseconds per match, so a word in
# 1% of a million rows would cost ~50 ms to rank whole: ranking takes the matches WINDOW at a
# time, newest (highest rowid) first, and ranks within each window (docs/design.md#search).
WINDOW = 1000
_RANK = "SELECT x.rowid AS r, bm25(timeline_text) AS s FROM timeline_text AS x"
_SCOPED = " JOIN timelines AS t ON t.timeline_id = (x.rowid >> 32)"
_CONTENT = "SELECT text, kind, timestamp_ms FROM timeline_text WHERE rowid = ?"
_TIMELINE = "SELECT agent_id, epoch FROM timelines WHERE timeline_id = ?"

# The messages SQLite gives a query it cannot parse (the rest are the store's failures).
_QUERY_ERRORS = (
    "fts5: syntax error",
    "unterminated string",
    "no such column",
    "unknown special query",
)


def search(
    request: SearchQuery, snippets: Snippets, conn: sqlite3.Connection
) -> tuple[list[SearchHit], bool]:
    """The hits of one page (ranked) and whether more follow, from one snapshot."""
    conn.execute("BEGIN")
    try:
        try:
            ranked = _ranked(conn, request)
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if text.startswith(_QUERY_ERRORS):
                raise InvalidArgument.field(
                    "query", f"not a valid search query ({text}); see docs/api.md for the syntax"
                ) from None
            raise
        hits = _hits(conn, snippets, request.query, ranked[: request.limit])
    finally:
        conn.execute("COMMIT")
    return hits, len(ranked) > request.limit


def _ranked(conn: sqlite3.Connection, request: SearchQuery) -> list[tuple[int, float]]:
    """(rowid, score) of hits offset .. offset + limit (one more: are there more?). A page
    that runs past its window's end continues at the start of the next window."""
    want = request.limit + 1
    window, skip = divmod(request.offset, WINDOW)
    sql, args = _ranking(request)
    ranked = conn.execute(sql, [*args, window * WINDOW, want, skip]).fetchall()
    if len(ranked) < want and skip + len(ranked) == WINDOW:
        more = conn.execute(sql, [*args, (window + 1) * WINDOW, want - len(ranked), 0])
        ranked += more.fetchall()
    return ranked


def _ranking(request: SearchQuery) -> tuple[str, list[Any]]:
    """One window's ranking: its parameters end with the window's start (in matches, newest
    first), then the LIMIT and OFFSET within it."""
    # Unscoped, no join: a dropped timeline's entries went in the transaction that dropped it.
    sql = [_RANK]
    args: list[Any] = []
    if request.agent_ids is not None:
        sql.append(_SCOPED)
    sql.append(" WHERE timeline_text MATCH ?")
    args.append(request.query)
    if request.agent_ids is not None:
        sql.append(" AND t.agent_id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(sorted(request.agent_ids)))
    if request.kinds is not None:
        sql.append(" AND x.kind IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(sorted(request.kinds)))
    if request.start_ms is not None:
        sql.append(" AND x.timestamp_ms >= ?")
        args.append(request.start_ms)
    if request.end_ms is not None:
        sql.append(" AND x.timestamp_ms < ?")
        args.append(request.end_ms)
    sql.append(f" ORDER BY x.rowid DESC LIMIT {WINDOW} OFFSET ?")
    return f"SELECT r, s FROM ({''.join(sql)}) ORDER BY s, r LIMIT ? OFFSET ?", args


def _hits(
    conn: sqlite3.Connection, snippets: Snippets, query: str, ranked: list[tuple[int, float]]
) -> list[SearchHit]:
    """The page's hits in `ranked` order, their content read by rowid."""
    rows = [(rowid, *conn.execute(_CONTENT, (rowid,)).fetchone()) for rowid, _ in ranked]
    marked = snippets.of(query, rows)
    hits = []
    for (rowid, score), (_, text, kind, timestamp_ms) in zip(ranked, rows, strict=True):
        agent_id, epoch = conn.execute(_TIMELINE, (rowid // _SPAN,)).fetchone()
        snippet = clip(marked.get(rowid) or text)
        hits.append(
            SearchHit(agent_id, Cursor(epoch, rowid % _SPAN), kind, timestamp_ms, snippet, score)
        )
    return hits


# --- indexing a state directory from before v5 ----------------------------------------------


class Backfill:
    """Indexes the rows a pre-v5 database holds, in the background: `start()` once the store
    is open, `await stop()` before the database closes. `running` says whether rows may still
    be missing from the index."""

    def __init__(
        self,
        database: Database,
        decode: Callable[[bytes], TimelineItem],
        batch: int | None = None,
    ) -> None:
        self._db = database
        self._decode = decode
        self._batch = batch or BACKFILL_BATCH
        self._task: asyncio.Task[None] | None = None
        self.running = False
        self.indexed = 0

    async def start(self) -> None:
        pending = await self._db.read(_backfill_cursor)
        if pending is None:
            return
        self.running = True
        self._task = asyncio.create_task(self._run(), name="corral-search-backfill")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        try:
            total = await self._db.read(_count_rows)
            # A new state directory has nothing to index: its (empty) pass is not news.
            say = log.info if total else log.debug
            say("search index: indexing %d stored rows in the background", total)
            looked = 0
            while True:
                seen, added, done = await self._db.write(
                    partial(_backfill_batch, self._decode, self._batch)
                )
                looked += seen
                self.indexed += added
                if done:
                    break
                log.info("search index: looked at %d of %d stored rows", looked, total)
            say("search index: done (%d rows indexed, %d looked at)", self.indexed, looked)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("search index: the background indexing failed (search misses rows)")
        finally:
            self.running = False


def _backfill_cursor(conn: sqlite3.Connection) -> str | None:
    found = conn.execute("SELECT value FROM meta WHERE key = ?", (BACKFILL_KEY,)).fetchone()
    return None if found is None else str(found[0])


def _count_rows(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM timeline_rows").fetchone()[0])


def _backfill_batch(
    decode: Callable[[bytes], TimelineItem], limit: int, conn: sqlite3.Connection
) -> tuple[int, int, bool]:
    """In the writer thread: index the next `limit` rows after the cursor. Returns (rows
    looked at, rows indexed, finished)."""
    cursor = _backfill_cursor(conn)
    if cursor is None:
        return 0, 0, True
    tid, seq = _parse_cursor(cursor)
    rows = conn.execute(
        "SELECT timeline_id, seq, timestamp_ms, item FROM timeline_rows"
        " WHERE (timeline_id, seq) > (?, ?) ORDER BY timeline_id, seq LIMIT ?",
        (tid, seq, limit),
    ).fetchall()
    if len(rows) < limit:
        conn.execute("DELETE FROM meta WHERE key = ?", (BACKFILL_KEY,))
    if not rows:
        return 0, 0, True
    low = rows[0][0] * _SPAN + rows[0][1]
    high = rows[-1][0] * _SPAN + rows[-1][1]
    present = {
        rowid
        for (rowid,) in conn.execute(
            "SELECT rowid FROM timeline_text WHERE rowid >= ? AND rowid <= ?", (low, high)
        )
    }
    new: list[tuple[Any, ...]] = []
    for row_tid, row_seq, timestamp_ms, blob in rows:
        rowid = row_tid * _SPAN + row_seq
        if rowid in present:
            continue
        try:
            item = decode(blob)
        except Exception:  # a row this corral cannot read is not searchable; the rest are
            continue
        text = text_of(item)
        if text:
            new.append((rowid, text, kind_of(item), timestamp_ms))
    insert(conn, new)
    if len(rows) == limit:
        last = f"{rows[-1][0]} {rows[-1][1]}"
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (last, BACKFILL_KEY))
    return len(rows), len(new), len(rows) < limit


class SearchIndex:
    """What the rpc edge searches: the database's index, read in the reader thread."""

    def __init__(self, database: Database, backfill: Backfill, *, enabled: bool = True) -> None:
        self._db = database
        self.backfill = backfill
        self.enabled = enabled  # off: nothing is indexed, and searching is refused
        self._snippets = Snippets()
        database.on_close(self._close)

    async def _close(self) -> None:
        await self._db.read(self._snippets.close)

    @property
    def indexing(self) -> bool:
        """Rows from before v5 may still be missing (the answer covers what is indexed)."""
        return self.backfill.running

    async def search(self, request: SearchQuery) -> tuple[list[SearchHit], bool]:
        return await self._db.read(partial(search, request, self._snippets))
