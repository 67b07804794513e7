"""The SQLite agent records: `AgentRecords` (records/store.py) in the `agents` table.

A record is the agent's FULL snapshot, encoded by the injected codec (the rpc edge's
corral.v1.Agent bytes), upserted whole: the last put of an agent wins, nothing is merged, so
no write can erase a field it did not carry. Puts wait on the loop in a dict by agent: the
puts of one agent before a commit coalesce into the latest snapshot, encoded once (on the loop,
at flush: a codec error fails that agent's puts only) and written as one row. The writes of
every agent waiting go to the database as one job (store/commits.py: group commit).

`created_order` (schema v2) is taken from a counter at each row write; an upsert keeps the
order the agent's first record got, so start-up lists agents in creation order.

Start-up (`load_headers`) reads every record in the reader thread and decodes it there; a
record that does not decode is reported with its error and the others load.

Must not: import protobuf or grpc (the codec is injected), or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from corral_server.domain.agent import Agent
from corral_server.records.store import BadRecord, LoadedAgents
from corral_server.store.commits import GroupCommit, Job, settle_all
from corral_server.store.database import Database

if TYPE_CHECKING:
    from corral_server.records.store import AgentRecords

Encode = Callable[[Agent], bytes]
Decode = Callable[[bytes], Agent]


class _Pending:
    """An agent's write waiting for the next commit: its latest snapshot (None = delete) and
    the futures of every put or delete it stands for."""

    __slots__ = ("agent", "futures")

    def __init__(self, agent: Agent | None) -> None:
        self.agent = agent
        self.futures: list[asyncio.Future[None]] = []


class _Write(NamedTuple):
    """One row write, ready for the writer thread (record None = delete)."""

    agent_id: str
    record: bytes | None
    updated_ms: int
    order: int


class SqliteAgentRecords:
    """Open with `await SqliteAgentRecords.open(database, encode, decode)`."""

    def __init__(self, database: Database, encode: Encode, decode: Decode) -> None:
        self._db = database
        self._encode = encode
        self._decode = decode
        self._pending: dict[str, _Pending] = {}
        self._next_order = 1
        self._commits = GroupCommit(database, self._take)

    @classmethod
    async def open(cls, database: Database, encode: Encode, decode: Decode) -> SqliteAgentRecords:
        records = cls(database, encode, decode)
        top = await database.read(
            lambda conn: conn.execute(
                "SELECT coalesce(max(created_order), 0) FROM agents"
            ).fetchone()[0]
        )
        records._next_order = int(top) + 1
        return records

    def put(self, agent: Agent) -> asyncio.Future[None]:
        return self._queue(agent.id, agent)

    def delete(self, agent_id: str) -> asyncio.Future[None]:
        return self._queue(agent_id, None)

    def _queue(self, agent_id: str, agent: Agent | None) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = self._pending.get(agent_id)
        if pending is None:
            pending = self._pending[agent_id] = _Pending(agent)
        else:
            pending.agent = agent  # the last write of the agent wins, whole
        pending.futures.append(future)
        self._commits.wake()
        return future

    def _take(self) -> Job | None:
        if not self._pending:
            return None
        taken, self._pending = self._pending, {}
        writes: list[_Write] = []
        futures: list[asyncio.Future[None]] = []
        for agent_id, pending in taken.items():
            agent = pending.agent
            try:
                record = None if agent is None else self._encode(agent)
            except Exception as exc:  # a snapshot the codec refuses fails its own puts only
                settle_all(pending.futures, False, exc)
                continue
            updated_ms = 0 if agent is None else agent.updated_at_ms
            writes.append(_Write(agent_id, record, updated_ms, self._next_order))
            self._next_order += 1
            futures.extend(pending.futures)
        if not writes:
            return None
        return Job(
            partial(_write, writes),
            partial(settle_all, futures, True),
            partial(settle_all, futures, False),
        )

    async def load_headers(self) -> LoadedAgents:
        return await self._db.read(partial(_load, self._decode))


# --- the threads' halves ---------------------------------------------------------------------

_UPSERT = (
    "INSERT INTO agents (agent_id, record, updated_ms, created_order) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record,"
    " updated_ms = excluded.updated_ms"
)


def _write(writes: list[_Write], conn: sqlite3.Connection) -> None:
    """In the writer thread: one row write per agent (the dict coalesced the rest)."""
    upserts = [w for w in writes if w.record is not None]
    deletes = [(w.agent_id,) for w in writes if w.record is None]
    if upserts:
        conn.executemany(_UPSERT, upserts)
    if deletes:
        conn.executemany("DELETE FROM agents WHERE agent_id = ?", deletes)


def _load(decode: Decode, conn: sqlite3.Connection) -> LoadedAgents:
    """In the reader thread: every record, decoded, in creation order."""
    agents: list[Agent] = []
    bad: list[BadRecord] = []
    for agent_id, record in conn.execute(
        "SELECT agent_id, record FROM agents ORDER BY created_order, agent_id"
    ):
        try:
            agent = decode(record)
        except Exception as exc:  # one bad record never stops the others
            bad.append(BadRecord(agent_id, f"{type(exc).__name__}: {exc}"))
            continue
        if agent.id != agent_id:
            bad.append(BadRecord(agent_id, f"the record holds agent {agent.id!r}"))
            continue
        agents.append(agent)
    return LoadedAgents(agents, bad)


if TYPE_CHECKING:

    def _satisfies_the_protocol(records: SqliteAgentRecords) -> AgentRecords:
        return records
