"""Whole records by key in one table (agent records, sub-agent runs): upserted whole or
deleted, never merged, so no write can erase a field it did not carry.

Owns the queue on the loop: a dict by key, so the writes of one key before a commit coalesce
into its latest value (None = delete), encoded once at flush (a codec error fails that key's
writes only) and written as one row; every key waiting goes to the database as one job of the
database's group commit (store/commits.py). Each row write takes the next `created_order`, which
an upsert does not change, so loading in that order is creation order.

Must not: know a table (the store passes its row writer), import protobuf or grpc, or run
SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Generic, NamedTuple, TypeVar

from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database

V = TypeVar("V")
W = TypeVar("W")  # what a write leaves for `committed`


class KeyedWrite(NamedTuple, Generic[V]):
    """One row write, ready for the writer thread (value and record None = delete)."""

    key: str
    value: V | None
    record: bytes | None
    order: int


class _Pending(Generic[V]):
    """A key's write waiting for the next commit: its latest value (None = delete) and the
    futures of every write it stands for."""

    __slots__ = ("futures", "value")

    def __init__(self, value: V | None) -> None:
        self.value = value
        self.futures: list[asyncio.Future[None]] = []


class KeyedRecords(Generic[V, W]):
    def __init__(
        self,
        database: Database,
        encode: Callable[[V], bytes],
        write: Callable[[list[KeyedWrite[V]], sqlite3.Connection], W],
        committed: Callable[[W], None] | None = None,
    ) -> None:
        """`write(writes, conn)` runs in the writer thread, inside the transaction (and may
        run again, alone, when its batch failed); `committed(what write returned)` on the
        loop once that transaction committed, before any later write runs."""
        self._encode = encode
        self._write = write
        self._committed = committed
        self._pending: dict[str, _Pending[V]] = {}
        # The created_order the next row write takes; the store sets it at open.
        self.next_order = 1
        self._commits = GroupCommit(database, self._take)

    def put(self, key: str, value: V | None) -> asyncio.Future[None]:
        """Upsert `value` whole (None: delete the key); resolves once committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(value)
        else:
            pending.value = value  # the last write of the key wins, whole
        pending.futures.append(future)
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if not self._pending:
            return None
        taken, self._pending = self._pending, {}
        writes: list[KeyedWrite[V]] = []
        futures: list[asyncio.Future[None]] = []
        for key, pending in taken.items():
            value = pending.value
            try:
                record = None if value is None else self._encode(value)
            except Exception as exc:  # a value the codec refuses fails its own writes only
                settle_all(pending.futures, False, exc)
                continue
            writes.append(KeyedWrite(key, value, record, self.next_order))
            self.next_order += 1
            futures.extend(pending.futures)
        if not writes:
            return None
        return Job(
            partial(self._write, writes),
            partial(self._commit, futures),
            partial(settle_all, futures, False),
        )

    def _commit(self, futures: list[asyncio.Future[None]], outcome: W) -> None:
        if self._committed is not None:
            self._committed(outcome)
        settle_all(futures, True, outcome)
