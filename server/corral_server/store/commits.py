"""Group commit, for every store of one database together: their writes gather on the loop
while the previous transaction is in the writer thread, then go to the database as ONE job
(one transaction, one fsync), so a burst costs one commit per round trip, not one per write.

Each store owns what is pending (a list, or a dict that coalesces); its `take()` hands it over
as one job (or None when nothing waits) and starts a new pending set. The database's journal
asks every store's `take` in turn (in the order the stores registered) and submits their jobs
as one; one such job is in flight at a time. So writes reach the database in call order
ACROSS stores: a write made after another (in any store) commits in the same transaction or
a later one, never an earlier one. The hub relies on this: a timeline row's event, appended
to the event log right after the row was handed to the timeline store, can never be durable
before the row (and is published only once durable).

A failed transaction fails every store's part of it and everything any store queued behind
it: an I/O error or a full disk fails them all alike, and no write made after a failed one
commits without it.

Must not: run SQLite on the loop, or know any table.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from corral_server.store.database import Database
from corral_server.store.errors import StoreError


class Job(NamedTuple):
    """What `take()` returns: the database job for everything pending."""

    run: Callable[[sqlite3.Connection], Any]  # in the writer thread, inside the transaction
    on_commit: Callable[[Any], None]  # on the loop, once durable
    on_fail: Callable[[BaseException], None]  # on the loop, when the commit failed


log = logging.getLogger(__name__)


class GroupCommit:
    """A store's place in its database's journal: `wake()` when something is pending."""

    def __init__(self, database: Database, take: Callable[[], Job | None]) -> None:
        self._journal = _Journal.of(database)
        self._journal.takes.append(take)

    def wake(self) -> None:
        """Something is pending: flush it at the end of this loop turn (so the writes of this
        turn join it), or once the transaction in flight has settled."""
        self._journal.wake()


class _Journal:
    """One per database: the stores' takes, and whether a transaction of theirs is in flight."""

    _of: weakref.WeakKeyDictionary[Database, _Journal] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, database: Database) -> _Journal:
        journal = cls._of.get(database)
        if journal is None:
            journal = cls._of[database] = cls(database)
        return journal

    def __init__(self, database: Database) -> None:
        self._db = database
        self.takes: list[Callable[[], Job | None]] = []
        self._in_flight = False
        self._scheduled = False
        # Set while nothing is in flight and no flush is scheduled.
        self._idle = asyncio.Event()
        self._idle.set()
        database.on_close(self.drain)

    async def drain(self) -> None:
        """Until everything the stores hold has been committed (or has failed)."""
        self._flush()
        while not self._idle.is_set():
            await self._idle.wait()

    def wake(self) -> None:
        if not self._in_flight and not self._scheduled:
            self._scheduled = True
            self._idle.clear()
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._in_flight:
            return
        jobs = [job for take in self.takes if (job := take()) is not None]
        if not jobs:
            self._idle.set()
            return
        self._in_flight = True
        self._idle.clear()
        runs = [job.run for job in jobs]
        try:
            self._db.submit(
                partial(_run_all, runs), partial(self._settled, jobs), partial(self._failed, jobs)
            )
        except StoreError as exc:  # the database is closed
            self._in_flight = False
            self._failed(jobs, exc)

    def _settled(self, jobs: list[Job], outcomes: list[Any]) -> None:
        self._in_flight = False
        try:
            for job, outcome in zip(jobs, outcomes, strict=True):
                _guarded(job.on_commit, outcome)
        finally:
            self._flush()  # what queued meanwhile goes at once: it has waited a commit

    def _failed(self, jobs: list[Job], error: BaseException) -> None:
        """Every store's part fails, and so does everything any store queued behind it:
        a write made after a failed one never commits without it (see the module doc)."""
        self._in_flight = False
        try:
            for job in jobs:
                _guarded(job.on_fail, error)
            for take in self.takes:
                behind = take()
                if behind is not None:
                    _guarded(behind.on_fail, error)
        finally:
            self._flush()


Run = Callable[[sqlite3.Connection], Any]


def _run_all(runs: list[Run], conn: sqlite3.Connection) -> list[Any]:
    """In the writer thread, inside the transaction: every store's part, in order."""
    return [run(conn) for run in runs]


def _guarded(settle: Callable[[Any], None], outcome: Any) -> None:
    """One store's settle: a bug in it must not leave the other stores' writes unsettled."""
    try:
        settle(outcome)
    except Exception:
        log.exception("a store failed to settle its commit")


def settle_all(futures: list[asyncio.Future[None]], ok: bool, outcome: object) -> None:
    """Resolve `futures` (ok) or fail them with `outcome`, the commit's error."""
    for future in futures:
        if future.done():
            continue
        if ok:
            future.set_result(None)
        else:
            assert isinstance(outcome, BaseException)
            future.set_exception(outcome)
