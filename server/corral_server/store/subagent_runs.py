"""The SQLite run records: `RunStore` (subagents/store.py) in the `subagent_runs` table.

Like the agent records: a record is the run's whole value, encoded by the injected codec,
upserted whole; the puts of one run before a commit coalesce into its latest value, and the
writes of all runs waiting go to the database as one job (store/commits.py: group commit).
`created_order` keeps the order of a run's first write.

Must not: import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from corral_server.domain.subagents import SubagentRun
from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database
from corral_server.subagents.store import BadRun, LoadedRuns

if TYPE_CHECKING:
    from corral_server.subagents.store import RunStore

Encode = Callable[[SubagentRun], bytes]
Decode = Callable[[bytes], SubagentRun]


class _Pending:
    __slots__ = ("futures", "run")

    def __init__(self, run: SubagentRun | None) -> None:
        self.run = run  # None: delete
        self.futures: list[asyncio.Future[None]] = []


class _Write(NamedTuple):
    run_id: str
    record: bytes | None
    order: int


class SqliteRunStore:
    """Open with `await SqliteRunStore.open(database, encode, decode)`."""

    def __init__(self, database: Database, encode: Encode, decode: Decode) -> None:
        self._db = database
        self._encode = encode
        self._decode = decode
        self._pending: dict[str, _Pending] = {}
        self._next_order = 1
        self._commits = GroupCommit(database, self._take)

    @classmethod
    async def open(cls, database: Database, encode: Encode, decode: Decode) -> SqliteRunStore:
        store = cls(database, encode, decode)
        top = await database.read(
            lambda conn: conn.execute(
                "SELECT coalesce(max(created_order), 0) FROM subagent_runs"
            ).fetchone()[0]
        )
        store._next_order = int(top) + 1
        return store

    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        return self._queue(run.run_id, run)

    def delete(self, run_id: str) -> asyncio.Future[None]:
        return self._queue(run_id, None)

    def _queue(self, run_id: str, run: SubagentRun | None) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = self._pending.get(run_id)
        if pending is None:
            pending = self._pending[run_id] = _Pending(run)
        else:
            pending.run = run  # the last write of the run wins, whole
        pending.futures.append(future)
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if not self._pending:
            return None
        taken, self._pending = self._pending, {}
        writes: list[_Write] = []
        futures: list[asyncio.Future[None]] = []
        for run_id, pending in taken.items():
            try:
                record = None if pending.run is None else self._encode(pending.run)
            except Exception as exc:  # a value the codec refuses fails its own puts only
                settle_all(pending.futures, False, exc)
                continue
            writes.append(_Write(run_id, record, self._next_order))
            self._next_order += 1
            futures.extend(pending.futures)
        if not writes:
            return None
        return Job(
            partial(_write, writes),
            partial(settle_all, futures, True),
            partial(settle_all, futures, False),
        )

    async def load(self) -> LoadedRuns:
        return await self._db.read(partial(_load, self._decode))


_UPSERT = (
    "INSERT INTO subagent_runs (run_id, record, created_order) VALUES (?, ?, ?)"
    " ON CONFLICT (run_id) DO UPDATE SET record = excluded.record"
)


def _write(writes: list[_Write], conn: sqlite3.Connection) -> None:
    upserts = [w for w in writes if w.record is not None]
    deletes = [(w.run_id,) for w in writes if w.record is None]
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
