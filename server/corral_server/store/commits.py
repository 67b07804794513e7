"""Group commit for one store: its writes gather on the loop while its previous job is in the
writer thread, then go to the database as ONE job (one place in one transaction), so a burst
costs one commit per round trip, not one per write.

The store owns what is pending (a list, or a dict that coalesces); `take()` hands it over as
one job (or None when nothing waits) and starts a new pending set. One job of a store is in
flight at a time: its writes reach the database in call order. Jobs of different stores
submitted in one loop turn share the writer's transaction; across stores, order is only what
the callers build by awaiting (a store's writes may wait behind its own in-flight job).

Must not: run SQLite on the loop, or know any table.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any, NamedTuple

from corral_server.store.database import Database
from corral_server.store.errors import StoreError


class Job(NamedTuple):
    """What `take()` returns: the database job for everything pending."""

    run: Callable[[sqlite3.Connection], Any]  # in the writer thread, inside the transaction
    on_commit: Callable[[Any], None]  # on the loop, once durable
    on_fail: Callable[[BaseException], None]  # on the loop, when the commit failed


class GroupCommit:
    def __init__(self, database: Database, take: Callable[[], Job | None]) -> None:
        self._db = database
        self._take = take
        self._in_flight = False
        self._scheduled = False

    def wake(self) -> None:
        """Something is pending: flush it at the end of this loop turn (so the writes of this
        turn join it), or once the job in flight has settled."""
        if not self._in_flight and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._in_flight:
            return
        job = self._take()
        if job is None:
            return
        self._in_flight = True
        try:
            self._db.submit(job.run, self._settled(job.on_commit), self._settled(job.on_fail))
        except StoreError as exc:  # the database is closed
            self._in_flight = False
            job.on_fail(exc)

    def _settled(self, then: Callable[[Any], None]) -> Callable[[Any], None]:
        def settle(outcome: Any) -> None:
            self._in_flight = False
            try:
                then(outcome)
            finally:
                self._flush()  # what queued meanwhile goes at once: it has waited a commit

        return settle


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
