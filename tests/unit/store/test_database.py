"""store/database.py: opening, the schema and its version, clear errors, group commit."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from corral_server.store.database import DB_FILE, Database
from corral_server.store.errors import SchemaTooNew, StoreUnavailable, StoreWriteFailed
from corral_server.store.meta import EVENT_LOG_INCARNATION, read_meta, write_meta
from corral_server.store.schema import SCHEMA_VERSION

TABLES = {
    "meta",
    "agents",
    "timelines",
    "timeline_rows",
    "event_runs",
    "create_requests",
    "finished_turns",
}


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "state")
    yield database
    await database.close()


def _inspect(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_open_creates_one_wal_database_with_every_table_of_the_schema(
    tmp_path: Path,
) -> None:
    state = tmp_path / "new" / "state"  # missing parents are created
    database = await Database.open(state)
    assert database.opened_version == 0
    await database.close()
    path = state / DB_FILE
    assert _inspect(path, "PRAGMA journal_mode") == [("wal",)]
    assert _inspect(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    names = {name for (name,) in _inspect(path, "SELECT name FROM sqlite_master")}
    assert names >= TABLES


async def test_reopening_runs_no_migration_and_keeps_the_data(tmp_path: Path) -> None:
    database = await Database.open(tmp_path)
    await write_meta(database, EVENT_LOG_INCARNATION, "inc-1")
    await database.close()
    database = await Database.open(tmp_path)
    try:
        assert database.opened_version == SCHEMA_VERSION
        assert await read_meta(database, EVENT_LOG_INCARNATION) == "inc-1"
        assert await read_meta(database, "absent") is None
    finally:
        await database.close()


async def test_a_database_from_a_newer_schema_is_refused_naming_both_versions(
    tmp_path: Path,
) -> None:
    database = await Database.open(tmp_path)
    await database.close()
    newer = SCHEMA_VERSION + 6
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute(f"PRAGMA user_version = {newer}")
    conn.close()
    before = (tmp_path / DB_FILE).read_bytes()
    with pytest.raises(SchemaTooNew) as refused:
        await Database.open(tmp_path)
    assert (refused.value.found, refused.value.supported) == (newer, SCHEMA_VERSION)
    message = str(refused.value)
    assert f"version {newer}" in message and f"up to {SCHEMA_VERSION}" in message
    assert (tmp_path / DB_FILE).read_bytes() == before  # untouched
    again = await Database.open(tmp_path / "elsewhere")  # the lock was released
    await again.close()


async def test_a_state_dir_that_is_a_file_gives_a_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="cannot create the state directory"):
        await Database.open(state)


async def test_a_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(StoreUnavailable, match="not a database"):
        await Database.open(tmp_path)


async def test_a_read_only_state_dir_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)
    if os.geteuid() == 0:
        # Root writes to a 0500 directory (CI runs as root): refuse creating files in it the
        # way a read-only file system would, so the same error path runs everywhere.
        real_open = os.open

        def read_only_open(path: Any, flags: int, *args: Any) -> int:
            if str(path).startswith(str(state)) and flags & os.O_CREAT:
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", read_only_open)
    try:
        with pytest.raises(StoreUnavailable, match="writable"):
            await Database.open(state)
        assert list(state.iterdir()) == []
    finally:
        state.chmod(0o700)


async def test_a_second_daemon_on_the_same_state_dir_is_refused(db: Database) -> None:
    with pytest.raises(StoreUnavailable, match="another corral daemon"):
        await Database.open(db.state_dir)


async def test_writes_queued_during_a_commit_share_the_next_transaction(db: Database) -> None:
    entered, release = threading.Event(), threading.Event()

    def blocking(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    def put(key: str) -> Callable[[sqlite3.Connection], int]:
        def run(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO meta VALUES (?, ?)", (key, "v"))
            return db.commits  # the commits before this job's transaction

        return run

    first = asyncio.ensure_future(db.write(blocking))
    await asyncio.to_thread(entered.wait, 10)
    later = [asyncio.ensure_future(db.write(put(f"k{i}"))) for i in range(50)]
    await asyncio.sleep(0)  # all fifty are queued behind the blocked transaction
    release.set()
    await first
    counts = await asyncio.gather(*later)
    assert len(set(counts)) == 1  # one transaction for all fifty
    assert await read_meta(db, "k49") == "v"


async def test_a_failing_job_fails_alone_and_leaves_nothing_behind(db: Database) -> None:
    entered, release = threading.Event(), threading.Event()

    def blocking(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    def put(key: str, fail: bool = False) -> Callable[[sqlite3.Connection], None]:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO meta VALUES (?, ?)", (key, "v"))
            if fail:
                raise ValueError("a bug in this job")

        return run

    first = asyncio.ensure_future(db.write(blocking))
    await asyncio.to_thread(entered.wait, 10)
    jobs = [put("a"), put("bad", fail=True), put("c")]
    results = [asyncio.ensure_future(db.write(job)) for job in jobs]
    release.set()
    await first
    outcomes = await asyncio.gather(*results, return_exceptions=True)
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], ValueError)
    assert await read_meta(db, "a") == "v" and await read_meta(db, "c") == "v"
    assert await read_meta(db, "bad") is None


async def test_a_full_disk_fails_the_write_clearly_and_keeps_what_was_committed(
    db: Database,
) -> None:
    await write_meta(db, "kept", "v")
    pages = await db.write(lambda c: int(c.execute("PRAGMA page_count").fetchone()[0]))
    await db.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))  # the disk is full
    with pytest.raises(StoreWriteFailed, match="full") as failed:
        await write_meta(db, "big", "x" * 100_000)
    assert str(db.path) in str(failed.value)
    assert await read_meta(db, "big") is None
    assert await read_meta(db, "kept") == "v"
    await db.write(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))  # space again
    await write_meta(db, "big", "x" * 100_000)
    assert await read_meta(db, "big") == "x" * 100_000


async def test_close_commits_what_was_queued_and_then_refuses_work(tmp_path: Path) -> None:
    database = await Database.open(tmp_path)
    pending = asyncio.ensure_future(write_meta(database, "last", "v"))
    await asyncio.sleep(0)  # queued
    await database.close()
    await pending
    await database.close()  # idempotent
    with pytest.raises(StoreUnavailable, match="closed"):
        await read_meta(database, "last")
    reopened = await Database.open(tmp_path)
    try:
        assert await read_meta(reopened, "last") == "v"
    finally:
        await reopened.close()


async def test_reads_never_block_the_loop_while_a_write_holds_the_writer(db: Database) -> None:
    entered, release = threading.Event(), threading.Event()

    def blocking(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    await write_meta(db, "k", "v")
    writing = asyncio.ensure_future(db.write(blocking))
    await asyncio.to_thread(entered.wait, 10)
    assert await read_meta(db, "k") == "v"  # the reader thread answers meanwhile
    release.set()
    await writing


async def test_log_reads_run_side_by_side_and_apart_from_page_reads(db: Database) -> None:
    """Two log reads at once, each waiting for the other to start, while a page read holds
    the reader thread: all three are answered only if they ran on threads of their own."""
    page_entered, release_page = threading.Event(), threading.Event()
    both = threading.Barrier(2, timeout=10)

    def page(conn: sqlite3.Connection) -> str:
        page_entered.set()
        release_page.wait(10)
        return "page"

    def log_read(conn: sqlite3.Connection) -> str:
        both.wait()  # raises BrokenBarrierError unless the other log read runs meanwhile
        return str(conn.execute("SELECT count(*) FROM event_runs").fetchone()[0])

    paging = asyncio.ensure_future(db.read(page))
    await asyncio.to_thread(page_entered.wait, 10)
    counts = await asyncio.gather(db.read(log_read, log=True), db.read(log_read, log=True))
    assert list(counts) == ["0", "0"]
    release_page.set()
    assert await paging == "page"
