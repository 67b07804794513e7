"""Where run records are kept: the `RunStore` protocol and its in-memory implementation
(store/subagent_runs.py is the SQLite one; both pass tests/unit/subagents/test_store_contract.py).

Writes return a future at the call, like the other records (records/store.py): the caller takes
its place in the write order at once and awaits the future when it must know the write is
durable. The last `put` of a run wins whole (only the registry puts runs).

Must not: import SQLite, protobuf or grpc.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple, Protocol

from corral_server.domain.subagents import SubagentRun
from corral_server.records.memory import done

if TYPE_CHECKING:
    pass


class BadRun(NamedTuple):
    """A stored run that could not be decoded: which run and why."""

    run_id: str
    error: str


class LoadedRuns(NamedTuple):
    """Every run that decoded, in the order of their first `put`, and every one that did not."""

    runs: list[SubagentRun]
    bad: list[BadRun]


class RunStore(Protocol):
    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        """Upsert the run's record, whole."""
        ...

    def delete(self, run_id: str) -> asyncio.Future[None]:
        """Forget the run (unknown: a no-op)."""
        ...

    async def load(self) -> LoadedRuns:
        """Every stored run (committed writes only), for start-up."""
        ...


class InMemoryRunStore:
    """The contract without durability: nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[str, SubagentRun] = {}  # insertion order = order of first put

    def put(self, run: SubagentRun) -> asyncio.Future[None]:
        self._runs[run.run_id] = run
        return done()

    def delete(self, run_id: str) -> asyncio.Future[None]:
        self._runs.pop(run_id, None)
        return done()

    async def load(self) -> LoadedRuns:
        return LoadedRuns(list(self._runs.values()), [])


if TYPE_CHECKING:

    def _satisfies_the_protocol(store: InMemoryRunStore) -> RunStore:
        return store
