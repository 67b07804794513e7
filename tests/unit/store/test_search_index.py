"""The full-text index beside the timeline store: it holds exactly the retained rows with text
(retention trims, rebases and drops take their entries in the same transaction), and a row
appended in a batch that retention trims at once is never indexed."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from corral_server.domain.timeline import (
    AssistantMessage,
    Reasoning,
    Todo,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.database import DB_FILE, Database
from corral_server.store.search import Backfill, SearchIndex, SearchQuery, entries
from corral_server.store.search_text import MAX_INDEXED_CHARS
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import NewRow


def row(word: str, n: int) -> NewRow:
    return NewRow(AssistantMessage(f"{word} number{n}"), timestamp_ms=n)


def indexed(state: Path) -> list[tuple[int, int]]:
    with closing(sqlite3.connect(state / DB_FILE)) as conn, conn:
        found = conn.execute("SELECT rowid FROM timeline_text ORDER BY rowid").fetchall()
    conn.close()
    return [(rowid >> 32, rowid & 0xFFFFFFFF) for (rowid,) in found]


async def test_the_index_follows_retention_rebase_and_drop(tmp_path: Path) -> None:
    database = await Database.open(tmp_path)
    store = await SqliteTimelineStore.open(database, ITEM_CODEC, retain_rows=3, search_index=True)
    await store.create("a")
    await store.create("b")
    await store.append("a", [row("alpha", n) for n in range(1, 6)])  # keeps 3..5
    await store.append("a", [NewRow(Todo(()), 6)])  # no text: no entry; keeps 4..6
    await store.append("b", [row("beta", 1)])
    assert indexed(tmp_path) == [(1, 4), (1, 5), (2, 1)]
    index = SearchIndex(database, Backfill(database, ITEM_CODEC.decode))
    hits, more = await index.search(SearchQuery("alpha", None, None, None, None, 0, 10))
    assert sorted(h.cursor.seq for h in hits) == [4, 5] and not more
    await store.rebase("a")
    await store.append("a", [row("gamma", 1)])
    await store.drop("b")
    assert indexed(tmp_path) == [(3, 1)]
    await database.close()


def backfill_cursor(state: Path) -> str | None:
    with closing(sqlite3.connect(state / DB_FILE)) as conn, conn:
        found = conn.execute("SELECT value FROM meta WHERE key = 'search_backfill'").fetchone()
    conn.close()
    return None if found is None else str(found[0])


async def test_opening_with_the_index_off_moves_the_cursor_before_its_appends(
    tmp_path: Path,
) -> None:
    database = await Database.open(tmp_path)
    assert backfill_cursor(tmp_path) == "0 0"  # a new database: nothing to index yet
    await database.write(lambda conn: conn.execute("DELETE FROM meta"))  # as if indexed
    store = await SqliteTimelineStore.open(database, ITEM_CODEC)  # off, no timelines
    assert backfill_cursor(tmp_path) == "1 0"  # a new timeline's first row comes after it
    await store.create("a")
    await store.append("a", [row("alpha", n) for n in range(1, 4)])
    assert indexed(tmp_path) == []  # off: nothing indexed at append
    await database.write(lambda conn: conn.execute("DELETE FROM meta"))
    await SqliteTimelineStore.open(database, ITEM_CODEC)
    assert backfill_cursor(tmp_path) == "1 3"  # a's next row is seq 4
    await database.write(
        lambda conn: conn.execute("UPDATE meta SET value = '0 0' WHERE key = 'search_backfill'")
    )
    await SqliteTimelineStore.open(database, ITEM_CODEC)
    assert backfill_cursor(tmp_path) == "0 0"  # an older, lower cursor stays
    await database.close()


def test_entries_of_a_plain_batch_match_those_taken_row_by_row() -> None:
    """The hot path (a batch of one-attribute kinds, by C iterators) and the general one give
    the same entries: rowids from the batch's first seq, empty texts left out, long ones cut."""
    long = "x" * (MAX_INDEXED_CHARS + 10)
    plain = [
        NewRow(AssistantMessage("one"), 10),
        NewRow(UserMessage(""), 11),  # no text: no entry
        NewRow(Reasoning(long), 12),
    ]
    mixed = [
        *plain,
        NewRow(ToolCall("c1", "grep", ToolCallStatus.COMPLETED, {"pattern": "one"}, "ok"), 13),
    ]
    base = (7 << 32) + 5
    expected = [
        (base, "one", "assistant_message", 10),
        (base + 2, long[:MAX_INDEXED_CHARS], "reasoning", 12),
    ]
    assert entries(7, 5, plain) == expected
    tool = (base + 3, 'grep\n{"pattern":"one"}\nok', "tool_call", 13)
    assert entries(7, 5, mixed) == [*expected, tool]
