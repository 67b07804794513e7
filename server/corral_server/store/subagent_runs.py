"""The SQLite run records: `RunStore` (subagents/store.py) in the `subagent_runs` table.

Like the agent records: a record is the run's whole value, encoded by the injected codec,
upserted whole; the queue, its coalescing and `created_order` (the order of a run's first
write) are store/keyed.py's.

Must not: import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.subagents import SubagentRun
from corral_server.store.database import Database
from corral_server.store.keyed import KeyedRecords, KeyedWrite
from corral_server.subagents.store import BadRun, LoadedRuns

if TYPE_CHECKING:
    from corral_server.subagents.store import RunStore

Encode = Callable[[SubagentRun], bytes]
Decode = Callable[[bytes], SubagentRun]


class SqliteRunStore:
    """Open with `await SqliteRunStore.open(database, encode, decode)`."""

    def __init__(self, database: Database, encode: Encode, decode: Decode) -> None:
        self._db = database
        self._decode = decode
        self._records = KeyedRecords(database, encode, _write)

    @classmethod
    async def open(cls, database: Database, encode: Encode, decode: Decode) -> SqliteRunStore:
        store = cls(database, encode, decode)
        top = await database.read(
            lambda conn: conn.execute(
                "SELECT coalesce(max(created_order), 0) FROM subagent_runs"
            ).fetchone()[0]
        )
        store._records.next_order = int(top) + 1
        return store

    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        return self._records.put(run.run_id, run)

    def delete(self, run_id: str) -> asyncio.Future[None]:
        return self._records.put(run_id, None)

    async def load(self) -> LoadedRuns:
        return await self._db.read(partial(_load, self._decode))


_UPSERT = (
    "INSERT INTO subagent_runs (run_id, record, created_order) VALUES (?, ?, ?)"
    " ON CONFLICT (run_id) DO UPDATE SET record = excluded.record"
)


def _write(writes: list[KeyedWrite[SubagentRun]], conn: sqlite3.Connection) -> None:
    upserts = [(w.key, w.record, w.order) for w in writes if w.value is not None]
    deletes = [(w.key,) for w in writes if w.value is None]
    if upserts:
        conn.executemany(_UPSERT, upserts)
    if deletes:
        conn.executemany("DELETE FROM subagent_runs WHERE run_id = ?", deletes)


def _load(decode: Decode, conn: sqlite3.Connection) -> LoadedRuns:
    runs: list[SubagentRun] = []
    bad: list[BadRun] = []
    for run_id, record in conn.execute(
        "SELECT run_id, record FROM subagent_runs ORDER BY created_order, run_id"
    ):
        try:
            run = decode(record)
        except Exception as exc:  # one bad record never stops the others
            bad.append(BadRun(run_id, f"{type(exc).__name__}: {exc}"))
            continue
        if run.run_id != run_id:
            bad.append(BadRun(run_id, f"the record holds run {run.run_id!r}"))
            continue
        runs.append(run)
    return LoadedRuns(runs, bad)


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: SqliteRunStore) -> RunStore:
        return store
