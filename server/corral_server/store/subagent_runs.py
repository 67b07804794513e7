"""The SQLite run records: `RunStore` (records/store.py) in the `subagent_runs` table.

Like the agent records: a record is the run's whole value (store/format/runs.py), upserted
whole; the queue, its coalescing, `created_order` (the order of a run's first write) and the
loading are store/keyed.py's.

Must not: run SQLite on the loop.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.subagents import SubagentRun
from corral_server.records.store import BadRun, LoadedRuns
from corral_server.store.database import Database
from corral_server.store.format.runs import decode_run, encode_run
from corral_server.store.keyed import KeyedStore, Table

if TYPE_CHECKING:
    from corral_server.records.store import RunStore

RUNS: Table[SubagentRun] = Table("subagent_runs", "run_id", "run", lambda run: run.run_id)


class SqliteRunStore(KeyedStore[SubagentRun]):
    """Open with `await SqliteRunStore.open(database)`."""

    def __init__(self, database: Database) -> None:
        super().__init__(database, RUNS, encode_run)

    @classmethod
    async def open(cls, database: Database) -> SqliteRunStore:
        """The store, its next write ordered after every stored run."""
        store = cls(database)
        await store._start()
        return store

    async def load(self) -> LoadedRuns:
        runs, bad = await self._db.read(partial(RUNS.load, decode_run))
        return LoadedRuns(runs, [BadRun(*b) for b in bad])


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: SqliteRunStore) -> RunStore:
        return store
