"""The RunStore contract (records/store.py), run against the in-memory and the SQLite store;
the storage format's round trip of a run (store/format/runs.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral_server.domain.agent import Usage
from corral_server.domain.subagents import (
    AnnounceState,
    Cleanup,
    Delivering,
    Outcome,
    RunId,
    SubagentRun,
)
from corral_server.records.memory import InMemoryRunStore
from corral_server.records.store import RunStore
from corral_server.store.database import Database
from corral_server.store.format.runs import decode_run, encode_run
from corral_server.store.subagent_runs import SqliteRunStore


class Stores:
    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.databases: list[Database] = []

    async def make(self) -> RunStore:
        if self.kind == "memory":
            return InMemoryRunStore()
        return await self.reopen()

    async def reopen(self) -> SqliteRunStore:
        database = await Database.open(self.directory, synchronous="NORMAL")
        self.databases.append(database)
        return await SqliteRunStore.open(database)

    async def close(self) -> None:
        for database in self.databases:
            await database.close()
        self.databases = []


@pytest.fixture(params=["memory", "sqlite"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    made = Stores(request.param, tmp_path / "state")
    yield made
    await made.close()


def run(run_id: str, **changes: object) -> SubagentRun:
    base = SubagentRun(RunId(run_id), "child", "parent", "parent", "a task", 1_000, 1)
    return replace(base, **changes)  # type: ignore[arg-type]


FULL = run(
    "full",
    label="lbl",
    cleanup=Cleanup.DELETE,
    run_timeout_s=30,
    expects_completion_message=True,
    started_at_ms=1_001,
    ended_at_ms=2_000,
    outcome=Outcome.TIMEOUT,
    end_reason="timeout after 30 s",
    result_text="résumé \u2603",
    usage=Usage(1, 2, 3, 0.25),
    announce_state=AnnounceState.PENDING,
    deferred_since_ms=1_500,
    attempts=2,
    delivering=Delivering("epoch-1", 7),
    announced_at_ms=None,
)


def test_the_codec_keeps_every_field() -> None:
    for value in (run("bare"), FULL):
        assert decode_run(encode_run(value)) == value


async def test_an_empty_store_loads_nothing(stores: Stores) -> None:
    store = await stores.make()
    assert await store.load() == ([], [])


async def test_runs_load_in_the_order_of_their_first_put_the_last_put_winning_whole(
    stores: Stores,
) -> None:
    store = await stores.make()
    await store.put(run("r1"))
    await store.put(FULL)
    await store.put(run("r1", ended_at_ms=5, outcome=Outcome.OK))
    loaded = await store.load()
    assert loaded.runs == [run("r1", ended_at_ms=5, outcome=Outcome.OK), FULL]


async def test_a_deleted_run_is_gone_and_deleting_an_unknown_one_is_a_no_op(
    stores: Stores,
) -> None:
    store = await stores.make()
    await store.put(run("r1"))
    await store.put(run("r2"))
    await store.delete("r1")
    await store.delete("never")
    assert [r.run_id for r in (await store.load()).runs] == ["r2"]


async def test_sqlite_runs_survive_a_reopen_and_a_bad_record_is_reported(tmp_path: Path) -> None:
    stores = Stores("sqlite", tmp_path / "state")
    try:
        store = await stores.reopen()
        await store.put(FULL)
        await stores.close()
        database = await Database.open(tmp_path / "state", synchronous="NORMAL")
        stores.databases.append(database)
        await database.write(
            lambda conn: conn.execute(
                "INSERT INTO subagent_runs VALUES ('broken', x'00', 99)"
            ).close()
        )
        reopened = await SqliteRunStore.open(database)
        loaded = await reopened.load()
        assert loaded.runs == [FULL]
        assert [bad.run_id for bad in loaded.bad] == ["broken"]
    finally:
        await stores.close()
