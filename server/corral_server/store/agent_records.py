"""The SQLite agent records: `AgentRecords` (records/store.py) in the `agents` table.

A record is the agent's FULL snapshot, encoded by the injected codec (the rpc edge's
corral.v1.Agent bytes, its queued prompts as summaries: their content is stored once, in
store/queued_prompts.py's table, in the same transaction), upserted whole: the last put of an
agent wins, nothing is merged, so no write can erase a field it did not carry. The queue, its
coalescing and `created_order` (schema v2: start-up lists agents in creation order) are
store/keyed.py's.

Start-up (`load_headers`) reads every record in the reader thread and decodes it there; a
record that does not decode is reported with its error and the others load.

Must not: import protobuf or grpc (the codec is injected), or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.agent import Agent
from corral_server.records.store import BadRecord, LoadedAgents
from corral_server.store.database import Database
from corral_server.store.keyed import KeyedRecords, KeyedWrite
from corral_server.store.queued_prompts import QueuedContent, Written

if TYPE_CHECKING:
    from corral_server.records.store import AgentRecords

Encode = Callable[[Agent], bytes]
Decode = Callable[[bytes], Agent]


class SqliteAgentRecords:
    """Open with `await SqliteAgentRecords.open(database, encode, decode)`."""

    def __init__(self, database: Database, encode: Encode, decode: Decode) -> None:
        self._db = database
        self._decode = decode
        self._prompts = QueuedContent()
        self._records = KeyedRecords(
            database, encode, partial(_write, self._prompts), self._prompts.committed
        )

    @classmethod
    async def open(cls, database: Database, encode: Encode, decode: Decode) -> SqliteAgentRecords:
        records = cls(database, encode, decode)
        top = await database.read(
            lambda conn: conn.execute(
                "SELECT coalesce(max(created_order), 0) FROM agents"
            ).fetchone()[0]
        )
        records._records.next_order = int(top) + 1
        return records

    def put(self, agent: Agent) -> asyncio.Future[None]:
        return self._records.put(agent.id, agent)

    def delete(self, agent_id: str) -> asyncio.Future[None]:
        return self._records.put(agent_id, None)

    async def load_headers(self) -> LoadedAgents:
        return await self._db.read(partial(_load, self._decode, self._prompts))


# --- the threads' halves ---------------------------------------------------------------------

_UPSERT = (
    "INSERT INTO agents (agent_id, record, updated_ms, created_order) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (agent_id) DO UPDATE SET record = excluded.record,"
    " updated_ms = excluded.updated_ms"
)


def _write(
    prompts: QueuedContent, writes: list[KeyedWrite[Agent]], conn: sqlite3.Connection
) -> Written:
    """In the writer thread: one row write per agent (the queue coalesced the rest), and the
    queued prompts' content it holds; what the queued-prompt table holds once committed."""
    upserts = [
        (w.key, w.record, w.value.updated_at_ms, w.order) for w in writes if w.value is not None
    ]
    deletes = [(w.key,) for w in writes if w.value is None]
    if upserts:
        conn.executemany(_UPSERT, upserts)
    if deletes:
        conn.executemany("DELETE FROM agents WHERE agent_id = ?", deletes)
    return {
        w.key: prompts.delete(conn, w.key) if w.value is None else prompts.sync(conn, w.value)
        for w in writes
    }


def _load(decode: Decode, prompts: QueuedContent, conn: sqlite3.Connection) -> LoadedAgents:
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
    return LoadedAgents(prompts.load(conn, agents), bad)


if TYPE_CHECKING:

    def _satisfies_the_protocol(records: SqliteAgentRecords) -> AgentRecords:
        return records
