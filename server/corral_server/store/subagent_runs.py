"""The SQLite run records: `RunStore` (records/store.py) in the `subagent_runs` table.

Like the agent records: a record is the run's whole value (store/format/runs.py), upserted
whole; the queue, its coalescing, `created_order` (the order of a run's first write) and the
loading are store/keyed.py's.

Must not: run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.subagents import SubagentRun
from corral_server.records.store import BadRun, LoadedRuns
from corral_server.store.database import Database
from corral_server.store.format.runs import decode_run, encode_run
from corral_server.store.keyed import KeyedRecords, Table

if TYPE_CHECKING:
    from corral_server.records.store import RunStore

RUNS: Table[SubagentRun] = Table("subagent_runs", "run_id", "run", lambda run: run.run_id)


class SqliteRunStore:
    """Open with `await SqliteRunStore.open(database)`; the codec is the store's format unless
    a test injects another."""

    def __init__(
        self,
        database: Database,
        encode: Callable[[SubagentRun], bytes] = encode_run,
        decode: Callable[[bytes], SubagentRun] = decode_run,
    ) -> None:
        self._db = database
        self._decode = decode
        self._records = KeyedRecords(database, encode, RUNS.write)

    @classmethod
    async def open(
        cls,
        database: Database,
        encode: Callable[[SubagentRun], bytes] = encode_run,
        decode: Callable[[bytes], SubagentRun] = decode_run,
    ) -> SqliteRunStore:
        store = cls(database, encode, decode)
        store._records.next_order = await RUNS.next_order(database)
        return store

    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        return self._records.put(run.run_id, run)

    def delete(self, run_id: str) -> asyncio.Future[None]:
        return self._records.put(run_id, None)

    async def load(self) -> LoadedRuns:
        runs, bad = await self._db.read(partial(RUNS.load, self._decode))
        return LoadedRuns(runs, [BadRun(*b) for b in bad])


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: SqliteRunStore) -> RunStore:
        return store
