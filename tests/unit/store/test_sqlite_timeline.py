"""SqliteTimelineStore beyond the shared contract: durability across reopen, group commit,
committed heads, a full disk, and the page query's plan."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from corral_server.domain.timeline import (
    AssistantMessage,
    Cursor,
    Direction,
    TimelineRow,
    ToolCall,
    ToolCallStatus,
    UserMessage,
)
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import StoreWriteFailed
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.store.timeline_tables import _PAGE_NEWEST, _PAGE_OLDEST
from corral_server.timeline.store import NewRow
from tests.support.stores import counting_epochs

AGENT = "agent-1"


def new_row(n: int) -> NewRow:
    return NewRow(UserMessage(f"m{n}"), timestamp_ms=1000 + n, turn_id=f"t{n}")


async def opened(state: Path, **options: object) -> tuple[Database, SqliteTimelineStore]:
    database = await Database.open(state)
    return database, await SqliteTimelineStore.open(database, ITEM_CODEC, **options)


async def all_rows(store: SqliteTimelineStore, agent: str) -> tuple[TimelineRow, ...]:
    return (await store.fetch(agent, Direction.TAIL, None, 0)).rows


async def test_reopening_keeps_rows_seqs_epochs_and_heads(tmp_path: Path) -> None:
    database, store = await opened(tmp_path, retain_rows=5, epoch_factory=counting_epochs())
    call = ToolCall("c1", "grep", ToolCallStatus.COMPLETED, {"n": 1, "xs": [1.5, None]}, "ok")
    await store.create("kept")
    await store.append("kept", [new_row(n) for n in range(1, 8)])  # retention keeps 3..7
    await store.append("kept", [NewRow(call, 2000, "t8", "p8")])
    await store.set_provider_message_id("kept", 4, "prov-4")
    await store.create("rebased")
    await store.append("rebased", [new_row(1)])
    await store.rebase("rebased")
    await store.append("rebased", [NewRow(AssistantMessage("after", "m"), 3000)])
    await store.create("dropped")
    await store.drop("dropped")
    heads = {agent: store.head(agent) for agent in ("kept", "rebased")}
    pages = {agent: await store.fetch(agent, Direction.TAIL, None, 0) for agent in heads}
    await database.close()

    database, store = await opened(tmp_path, retain_rows=5, epoch_factory=counting_epochs())
    try:
        assert {agent: store.head(agent) for agent in heads} == heads
        for agent, page in pages.items():
            assert await store.fetch(agent, Direction.TAIL, None, 0) == page
        kept = await all_rows(store, "kept")
        assert [row.seq for row in kept] == [4, 5, 6, 7, 8]
        assert kept[0].provider_message_id == "prov-4"
        assert kept[-1] == TimelineRow(8, 2000, call, "t8", "p8")
        with pytest.raises(KeyError):
            store.head("dropped")
        # Numbering goes on where it stopped; a new timeline gets an unused timeline id.
        assert (await store.append("kept", [new_row(9)]))[0].seq == 9
        await store.create("new")
        await store.append("new", [new_row(1)])
        assert [row.seq for row in await all_rows(store, "new")] == [1]
        assert [row.seq for row in await all_rows(store, "kept")] == [5, 6, 7, 8, 9]
    finally:
        await database.close()


async def test_appends_of_a_hundred_agents_in_one_loop_turn_commit_together(
    tmp_path: Path,
) -> None:
    database, store = await opened(tmp_path)
    try:
        agents = [f"agent-{i}" for i in range(100)]
        await asyncio.gather(*(store.create(agent) for agent in agents))
        before = database.commits
        await asyncio.gather(*(store.append(agent, [new_row(1), new_row(2)]) for agent in agents))
        assert database.commits - before == 1
        for agent in agents:
            assert store.head(agent).next_seq == 3
    finally:
        await database.close()


async def test_appends_queued_during_a_commit_go_together_in_the_next_one(
    tmp_path: Path,
) -> None:
    database, store = await opened(tmp_path)
    try:
        await store.create(AGENT)
        before = database.commits
        first = store.append_nowait(AGENT, [new_row(1)])
        await asyncio.sleep(0)  # the first commit is under way...
        rest = [store.append_nowait(AGENT, [new_row(n)]) for n in range(2, 201)]
        await first
        await asyncio.gather(*rest)
        assert database.commits - before <= 3  # 200 appends, not 200 commits
        assert [row.seq for row in await all_rows(store, AGENT)] == list(range(1, 201))
    finally:
        await database.close()


async def test_head_shows_only_committed_rows(tmp_path: Path) -> None:
    database, store = await opened(tmp_path)
    try:
        await store.create(AGENT)
        pending = store.append_nowait(AGENT, [new_row(1), new_row(2)])
        assert store.head(AGENT).next_seq == 1  # not durable yet
        rows = await pending
        assert store.head(AGENT).next_seq == 3
        assert [row.seq for row in rows] == [1, 2]
    finally:
        await database.close()


async def test_a_full_disk_fails_the_append_and_those_behind_it_without_a_gap(
    tmp_path: Path,
) -> None:
    database, store = await opened(tmp_path)
    try:
        await store.create(AGENT)
        await store.append(AGENT, [new_row(1)])
        pages = await database.write(lambda c: int(c.execute("PRAGMA page_count").fetchone()[0]))
        await database.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))
        big = NewRow(AssistantMessage("x" * 200_000), 0)
        failing = store.append_nowait(AGENT, [big])
        behind = store.append_nowait(AGENT, [new_row(3)])  # its seq came after the failing one
        with pytest.raises(StoreWriteFailed, match="full"):
            await failing
        with pytest.raises(StoreWriteFailed):
            await behind
        assert store.head(AGENT).next_seq == 2
        await database.write(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))
        assert (await store.append(AGENT, [new_row(2)]))[0].seq == 2  # no gap
    finally:
        await database.close()
    database, store = await opened(tmp_path)
    try:
        assert [row.seq for row in await all_rows(store, AGENT)] == [1, 2]
        assert store.head(AGENT).next_seq == 3
    finally:
        await database.close()


async def test_a_codec_error_fails_only_that_call(tmp_path: Path) -> None:
    class Refusing:
        def encode(self, item: object) -> bytes:
            raise ValueError("cannot encode")

        def decode(self, data: bytes) -> UserMessage:
            return UserMessage("")

    database = await Database.open(tmp_path)
    try:
        store = await SqliteTimelineStore.open(database, Refusing())
        await store.create(AGENT)
        with pytest.raises(ValueError, match="cannot encode"):
            await store.append(AGENT, [new_row(1)])
        assert store.head(AGENT).next_seq == 1
    finally:
        await database.close()


@pytest.mark.parametrize("sql", [_PAGE_NEWEST, _PAGE_OLDEST])
async def test_a_page_is_a_primary_key_range_search_never_a_scan(tmp_path: Path, sql: str) -> None:
    database, _ = await opened(tmp_path)
    await database.close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    try:
        plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, (1,) * 4))
    finally:
        conn.close()
    assert "SEARCH timeline_rows USING PRIMARY KEY (timeline_id=? AND seq>? AND seq<?)" in plan
    assert "SCAN" not in plan and "TEMP B-TREE" not in plan  # no scan, no sort


async def test_fetch_before_and_after_read_the_rows_of_the_committed_epoch(
    tmp_path: Path,
) -> None:
    database, store = await opened(tmp_path, epoch_factory=counting_epochs())
    try:
        await store.create(AGENT)
        await store.append(AGENT, [new_row(n) for n in range(1, 11)])
        await store.rebase(AGENT)
        await store.append(AGENT, [new_row(n) for n in range(101, 104)])
        page = await store.fetch(AGENT, Direction.AFTER, Cursor("epoch-2", 0), 0)
        assert [row.item for row in page.rows] == [UserMessage(f"m{n}") for n in (101, 102, 103)]
        assert (
            await database.read(
                lambda c: c.execute("SELECT count(*) FROM timeline_rows").fetchone()[0]
            )
            == 3
        )  # the old epoch's rows are gone
    finally:
        await database.close()
