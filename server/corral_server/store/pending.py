"""Writes a store queues on the loop for its next group commit (store/commits.py), each call
with the future its caller awaits. The stores that append (request ids, finished turns, the
usage ledger, the event log) share this step; a store of whole records by key coalesces
instead (store/keyed.py).

`add` queues and wakes the journal. At the flush everything queued becomes one job, in call
order: `work(items)`, asked on the loop, is what runs in the writer thread inside the
transaction (given the connection; bound then, so it reads nothing of the loop's). Until that
job settles its items are `in_flight` (a store's reads look there and in `items`); then every
future of the job resolves, or fails with the commit's error, and `settled(items, ok,
outcome)` does the store's own bookkeeping.

Must not: run SQLite on the loop, or know what a store's items are.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Generic, TypeVar

from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database

T = TypeVar("T")


class PendingWrites(Generic[T]):
    def __init__(
        self,
        database: Database,
        work: Callable[[list[T]], Callable[[sqlite3.Connection], Any]],
        settled: Callable[[list[T], bool, Any], None] | None = None,
    ) -> None:
        self._work = work
        self._settled = settled
        self.items: list[T] = []  # queued, not yet taken
        self.in_flight: list[T] = []  # taken: in the transaction under way
        self._futures: list[asyncio.Future[None]] = []
        self._commits = GroupCommit(database, self._take)

    def add(self, items: Iterable[T]) -> asyncio.Future[None]:
        """Queue `items`; the future resolves once they committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.items.extend(items)
        self._futures.append(future)
        self._commits.wake()
        return future

    def drop_queued(self) -> list[asyncio.Future[None]]:
        """Forget what is queued and not taken yet; the futures of those writes, unsettled."""
        futures, self.items, self._futures = self._futures, [], []
        return futures

    def _take(self) -> Job | None:
        if not self.items:
            return None
        self.in_flight, self.items = self.items, []
        futures, self._futures = self._futures, []
        items = self.in_flight
        return Job(
            self._work(items),
            partial(self._settle, items, futures, True),
            partial(self._settle, items, futures, False),
        )

    def _settle(
        self, items: list[T], futures: list[asyncio.Future[None]], ok: bool, outcome: object
    ) -> None:
        self.in_flight = []
        settle_all(futures, ok, outcome)
        if self._settled is not None:
            self._settled(items, ok, outcome)
