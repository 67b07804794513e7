"""Whole records by key in one table (agent records, sub-agent runs): upserted whole or
deleted, never merged, so no write can erase a field it did not carry.

`Table` names such a table (its key column, the extra columns a row carries) and writes and
reads its rows in the threads: start-up reads every record in `created_order` and decodes it
in the reader thread; a record that does not decode, or holds another key, is reported with why
and the others load.

Owns the queue on the loop: a dict by key, so the writes of one key before a commit coalesce
into its latest value (None = delete), encoded once at flush (a codec error fails that key's
writes only) and written as one row; every key waiting goes to the database as one job of the
database's group commit (store/commits.py). Each row write takes the next `created_order`, which
an upsert does not change, so loading in that order is creation order.

Must not: know a table's name or its codec (the store passes its `Table` and codec), import
protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database

V = TypeVar("V")
W = TypeVar("W")  # what a write leaves for `committed`

# A record that did not load: its key, and why.
Bad = tuple[str, str]


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


class Table(NamedTuple, Generic[V]):
    """A table of whole records: `key` -> `record` (a blob), `created_order`, and the columns
    named in `extra`, whose values `extra_of(value)` gives. `noun` names a record in errors."""

    name: str
    key: str
    noun: str
    key_of: Callable[[V], str]
    extra: tuple[str, ...] = ()
    extra_of: Callable[[V], tuple[Any, ...]] = lambda _: ()

    async def next_order(self, database: Database) -> int:
        """The created_order the next row write takes: one past every stored row's."""
        sql = f"SELECT coalesce(max(created_order), 0) FROM {self.name}"
        top = await database.read(lambda conn: conn.execute(sql).fetchone()[0])
        return int(top) + 1

    def write(self, writes: list[KeyedWrite[V]], conn: sqlite3.Connection) -> None:
        """In the writer thread: one upsert or delete per key (the queue coalesced the rest)."""
        columns = (self.key, "record", *self.extra, "created_order")
        updated = ", ".join(f"{c} = excluded.{c}" for c in ("record", *self.extra))
        upsert = (
            f"INSERT INTO {self.name} ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))})"
            f" ON CONFLICT ({self.key}) DO UPDATE SET {updated}"
        )
        extra_of = self.extra_of
        upserts = [
            (w.key, w.record, *extra_of(w.value), w.order) for w in writes if w.value is not None
        ]
        deletes = [(w.key,) for w in writes if w.value is None]
        if upserts:
            conn.executemany(upsert, upserts)
        if deletes:
            conn.executemany(f"DELETE FROM {self.name} WHERE {self.key} = ?", deletes)

    def load(
        self, decode: Callable[[bytes], V], conn: sqlite3.Connection
    ) -> tuple[list[V], list[Bad]]:
        """In the reader thread: every record, decoded, in creation order; the bad ones apart."""
        values: list[V] = []
        bad: list[Bad] = []
        for key, record in conn.execute(
            f"SELECT {self.key}, record FROM {self.name} ORDER BY created_order, {self.key}"
        ):
            try:
                value = decode(record)
            except Exception as exc:  # one bad record never stops the others
                bad.append((key, f"{type(exc).__name__}: {exc}"))
                continue
            if self.key_of(value) != key:
                bad.append((key, f"the record holds {self.noun} {self.key_of(value)!r}"))
                continue
            values.append(value)
        return values, bad


class KeyedStore(Generic[V]):
    """A store of whole records in one `Table`: `put` and `delete` by the table's key, the
    queue `KeyedRecords`; the store adds its load. `write` (default: the table's rows) and
    `committed` as in KeyedRecords. Call `_start()` once, before the first write."""

    def __init__(
        self,
        database: Database,
        table: Table[V],
        encode: Callable[[V], bytes],
        write: Callable[[list[KeyedWrite[V]], sqlite3.Connection], Any] | None = None,
        committed: Callable[[Any], None] | None = None,
    ) -> None:
        self._db = database
        self._table = table
        self._records = KeyedRecords(database, encode, write or table.write, committed)

    async def _start(self) -> None:
        self._records.next_order = await self._table.next_order(self._db)

    def put(self, value: V) -> asyncio.Future[None]:
        """Upsert the value's record, whole; resolves once committed."""
        return self._records.put(self._table.key_of(value), value)

    def delete(self, key: str) -> asyncio.Future[None]:
        """Forget the key's record (unknown: a no-op)."""
        return self._records.put(key, None)
