"""The single writer's append (`append_encoded`): each row's item arrives encoded once, shared
with the row's event (rpc/wire.py `row_appended_batch`). What it stores must be exactly what
the store's own encoding stored: the same blobs on disk, the same rows read back, the same
kept tool outputs and index entries."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from corral_server.domain.timeline import (
    AssistantMessage,
    Direction,
    OutputRef,
    Reasoning,
    TimelineRow,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.rpc.wire import row_appended_batch
from corral_server.store.database import DB_FILE, Database
from corral_server.store.search import Backfill, SearchIndex, SearchQuery
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.store import NewRow

CALL = ToolCall("c1", "grep", ToolCallStatus.COMPLETED, {"n": 1, "xs": [1.5, None]}, "ok")
KEPT = ToolCall(
    "c2", "cat", ToolCallStatus.COMPLETED, output_ref=OutputRef("blob-1", 5, json=False)
)
ROWS = [
    NewRow(AssistantMessage("a streamed chunk", "m1"), 1000, "turn-1", "m1"),
    NewRow(AssistantMessage("", ""), 1000, "turn-1"),  # empty fields: omitted on the wire
    NewRow(AssistantMessage("x" * 20_000, "m3"), 1001, "turn-1", "m3"),  # long varints
    NewRow(Reasoning("thinking about it"), 1001, "turn-1"),
    NewRow(UserMessage("hello", "cm-1"), 1002, ""),
    NewRow(CALL, 1003, "turn-2", "p4"),
    NewRow(KEPT, 1004, "turn-2", output=b"hello"),
]


def blobs(state: Path) -> list[tuple[int, int, int, str, str, bytes]]:
    with closing(sqlite3.connect(state / DB_FILE)) as conn:
        found = conn.execute(
            "SELECT timeline_id, seq, timestamp_ms, turn_id, provider_message_id, item"
            " FROM timeline_rows ORDER BY timeline_id, seq"
        ).fetchall()
    return [tuple(row) for row in found]


async def written(
    state: Path, shared: bool, search_index: bool = False
) -> tuple[Database, SqliteTimelineStore]:
    database = await Database.open(state)
    store = await SqliteTimelineStore.open(database, ITEM_CODEC, search_index=search_index)
    await store.create("a")
    if shared:
        _, items = row_appended_batch("a", "epoch", 1, ROWS)
        await store.append_encoded("a", ROWS, items)
    else:
        await store.append("a", ROWS)
    return database, store


async def test_the_shared_items_are_the_codecs_bytes() -> None:
    _, items = row_appended_batch("a", "epoch", 1, ROWS)
    assert items == [ITEM_CODEC.encode(row.item) for row in ROWS]


async def test_rows_written_with_shared_items_read_back_as_the_old_encoding(tmp_path: Path) -> None:
    old_db, old = await written(tmp_path / "old", shared=False)
    new_db, new = await written(tmp_path / "new", shared=True)
    assert blobs(tmp_path / "new") == blobs(tmp_path / "old")
    old_page = await old.fetch("a", Direction.TAIL, None, 0)
    new_page = await new.fetch("a", Direction.TAIL, None, 0)
    assert new_page.rows == old_page.rows
    assert new_page.rows[5] == TimelineRow(6, 1003, CALL, "turn-2", "p4")
    assert (await new.read_output("a", "blob-1", 0, 100)).data == b"hello"
    assert new.head("a").next_seq == old.head("a").next_seq == len(ROWS) + 1
    await old_db.close()
    await new_db.close()


async def test_without_items_the_store_encodes_them_itself(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "new")
    store = await SqliteTimelineStore.open(database, ITEM_CODEC)
    await store.create("a")
    await store.append_encoded("a", ROWS, None)
    old_db, _ = await written(tmp_path / "old", shared=False)
    assert blobs(tmp_path / "new") == blobs(tmp_path / "old")
    await old_db.close()
    await database.close()


async def test_shared_rows_are_indexed_when_the_index_is_on(tmp_path: Path) -> None:
    database, _ = await written(tmp_path, shared=True, search_index=True)
    index = SearchIndex(database, Backfill(database, ITEM_CODEC.decode))
    hits, _ = await index.search(SearchQuery("thinking", None, None, None, None, 0, 10))
    assert [hit.cursor.seq for hit in hits] == [4]
    await database.close()


async def test_a_wrong_number_of_items_queues_nothing(tmp_path: Path) -> None:
    database = await Database.open(tmp_path)
    store = await SqliteTimelineStore.open(database, ITEM_CODEC)
    await store.create("a")
    with pytest.raises(ValueError):
        store.append_encoded("a", ROWS, [b""])
    await store.append("a", ROWS[:1])
    assert store.head("a").next_seq == 2  # the refused rows took no seqs
    await database.close()
