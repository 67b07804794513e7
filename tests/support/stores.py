"""Stores for the shared contract suites: the same tests run against every backend.

`Stores(kind, directory)` makes timeline stores of one kind ("memory" or "sqlite");
`Records(kind, directory)` makes the records of records/store.py (agent records, request ids,
finished turns, the event log). `close()` closes every database they opened. A later backend
joins the suites by adding a kind here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral_server.domain.agent import Agent, AgentId, Idle
from corral_server.records import (
    AgentRecords,
    CreateRequests,
    EventLog,
    FinishedTurns,
    InMemoryAgentRecords,
    InMemoryCreateRequests,
    InMemoryEventLog,
    InMemoryFinishedTurns,
)
from corral_server.rpc.item_codec import ITEM_CODEC
from corral_server.store.agent_records import SqliteAgentRecords
from corral_server.store.database import Database
from corral_server.store.event_log import SqliteEventLog
from corral_server.store.format.agents import decode_agent, encode_agent
from corral_server.store.requests import SqliteCreateRequests, SqliteFinishedTurns
from corral_server.store.sqlite_timeline import SqliteTimelineStore
from corral_server.timeline.memory import InMemoryTimelineStore
from corral_server.timeline.store import TimelineStore

KINDS = ("memory", "sqlite")


def counting_epochs() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"epoch-{next(counter)}"


class _Databases:
    """The databases a store maker of one kind opened: each in a directory of its own below
    `directory`, closed together by `close()`. NORMAL: the semantics of FULL without an fsync
    per commit (tests/unit/store: FULL)."""

    _prefix = "database"

    def __init__(self, kind: str, directory: Path) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown store kind {kind!r}")
        self.kind = kind
        self._directory = directory
        self._names = itertools.count(1)
        self._databases: list[Database] = []

    async def open_database(self, directory: Path | None = None) -> Database:
        """A database in `directory` (default: a new one), closed by `close()`."""
        where = directory or self._directory / f"{self._prefix}-{next(self._names)}"
        database = await Database.open(where, synchronous="NORMAL")
        self._databases.append(database)
        return database

    async def close(self) -> None:
        databases, self._databases = self._databases, []
        for database in databases:
            await database.close()


class Stores(_Databases):
    _prefix = "store"

    async def make(self, **options: Any) -> TimelineStore:
        """A new, empty store; `options` are the stores' shared keyword arguments."""
        if self.kind == "memory":
            return InMemoryTimelineStore(**options)
        return await SqliteTimelineStore.open(await self.open_database(), ITEM_CODEC, **options)


class AgentCodec:
    """The store's agent codec (store/format/agents.py) as the (encode, decode) pair the stores
    take."""

    encode = staticmethod(encode_agent)
    decode = staticmethod(decode_agent)


def sample_agent(agent_id: str, **changes: Any) -> Agent:
    """An idle agent with every optional field left at its default unless `changes` sets it."""
    agent = Agent(
        id=AgentId(agent_id),
        provider="scripted",
        cwd="/work",
        lifecycle=Idle(),
        created_at_ms=1_000,
        updated_at_ms=1_000,
        epoch="epoch-1",
        next_seq=1,
    )
    return replace(agent, **changes)


class Records(_Databases):
    """The records of records/store.py, of one kind ("memory" or "sqlite"): each `make_*`
    gives a new, empty one (SQLite: on a database of its own); `close()` closes every database
    opened. SQLite-only tests reopen a directory with `open_database`."""

    _prefix = "records"

    async def make_agent_records(self) -> AgentRecords:
        if self.kind == "memory":
            return InMemoryAgentRecords()
        database = await self.open_database()
        return await SqliteAgentRecords.open(database, AgentCodec.encode, AgentCodec.decode)

    async def make_create_requests(self) -> CreateRequests:
        if self.kind == "memory":
            return InMemoryCreateRequests()
        return SqliteCreateRequests(await self.open_database())

    async def make_finished_turns(self, **options: Any) -> FinishedTurns:
        if self.kind == "memory":
            return InMemoryFinishedTurns()
        return SqliteFinishedTurns(await self.open_database(), **options)

    async def make_event_log(self, **options: Any) -> EventLog:
        if self.kind == "memory":
            return InMemoryEventLog(**options)
        return await SqliteEventLog.open(await self.open_database(), **options)
