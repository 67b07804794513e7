"""One group commit per database (store/commits.py): a write made after another, in any store,
commits in the same transaction or a later one, never an earlier one; a failed transaction
fails what every store queued behind it; close commits what the stores still hold."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database


class Store:
    """A store whose writes record the transaction they ran in (the commit count before)."""

    def __init__(self, database: Database, fail_on: str = "") -> None:
        self.db = database
        self.fail_on = fail_on
        self.pending: list[tuple[str, asyncio.Future[None]]] = []
        self.ran_in: dict[str, int] = {}
        self.commits = GroupCommit(database, self.take)

    def write(self, name: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((name, future))
        self.commits.wake()
        return future

    def take(self) -> Job | None:
        if not self.pending:
            return None
        taken, self.pending = self.pending, []
        names = [name for name, _ in taken]
        futures = [future for _, future in taken]

        def run(conn: sqlite3.Connection) -> None:
            for name in names:
                if name == self.fail_on:
                    raise sqlite3.OperationalError("database or disk is full")
                self.ran_in[name] = self.db.commits

        def failed(error: BaseException) -> None:
            settle_all(futures + [f for _, f in self.pending], False, error)
            self.pending = []

        return Job(run, lambda _: settle_all(futures, True, None), failed)


async def test_a_write_after_another_never_commits_before_it(tmp_path: Path) -> None:
    db = await Database.open(tmp_path, synchronous="NORMAL")
    try:
        rows, log = Store(db), Store(db)
        first = rows.write("row 1")
        await asyncio.sleep(0)  # the journal flushes: row 1's transaction is in flight
        second = rows.write("row 2")  # waits for row 1's transaction
        event = log.write("event 2")  # made after row 2: must not commit before it
        await asyncio.gather(first, second, event)
        assert rows.ran_in["row 1"] < rows.ran_in["row 2"] <= log.ran_in["event 2"]
    finally:
        await db.close()


async def test_a_failed_transaction_fails_what_every_store_queued_behind_it(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path, synchronous="NORMAL")
    try:
        rows, log = Store(db, fail_on="row 1"), Store(db)
        first = rows.write("row 1")
        await asyncio.sleep(0)
        behind = log.write("event 1")  # queued while row 1's transaction runs
        for future in (first, behind):
            with pytest.raises(Exception, match="disk is full"):
                await future
        assert log.ran_in == {}
        await log.write("event 2")  # and the next write goes through
        assert "event 2" in log.ran_in
    finally:
        await db.close()


async def test_close_commits_what_the_stores_still_hold(tmp_path: Path) -> None:
    db = await Database.open(tmp_path, synchronous="NORMAL")
    rows, log = Store(db), Store(db)
    first = rows.write("row 1")
    await asyncio.sleep(0)
    held = [rows.write("row 2"), log.write("event 2")]  # not submitted yet: row 1 is in flight
    await db.close()
    await asyncio.gather(first, *held)
    assert set(rows.ran_in) | set(log.ran_in) == {"row 1", "row 2", "event 2"}
