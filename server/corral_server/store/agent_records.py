"""The SQLite agent records: `AgentRecords` (records/store.py) in the `agents` table.

A record is the agent's FULL snapshot (store/format/agents.py: its queued prompts as summaries;
their content is stored once, in store/queued_prompts.py's table, in the same transaction),
upserted whole: the last put of an agent wins, nothing is merged, so no write can erase a field
it did not carry. The queue, its coalescing, `created_order` (start-up lists agents in creation
order) and the loading (a record that does not decode is reported, the others load) are
store/keyed.py's.

Must not: run SQLite on the loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.agent import Agent
from corral_server.records.store import BadRecord, LoadedAgents
from corral_server.store.database import Database
from corral_server.store.format.agents import decode_agent, encode_agent
from corral_server.store.keyed import KeyedStore, KeyedWrite, Table
from corral_server.store.queued_prompts import QueuedContent, Written

if TYPE_CHECKING:
    from corral_server.records.store import AgentRecords

Encode = Callable[[Agent], bytes]
Decode = Callable[[bytes], Agent]

AGENTS: Table[Agent] = Table(
    "agents",
    "agent_id",
    "agent",
    lambda agent: agent.id,
    ("updated_ms",),
    lambda agent: (agent.updated_at_ms,),
)


class SqliteAgentRecords(KeyedStore[Agent]):
    """Open with `await SqliteAgentRecords.open(database)`; the codec is the store's format
    unless a test injects another."""

    def __init__(
        self, database: Database, encode: Encode = encode_agent, decode: Decode = decode_agent
    ) -> None:
        self._decode = decode
        self._prompts = prompts = QueuedContent()
        super().__init__(database, AGENTS, encode, partial(_write, prompts), prompts.committed)

    @classmethod
    async def open(
        cls, database: Database, encode: Encode = encode_agent, decode: Decode = decode_agent
    ) -> SqliteAgentRecords:
        records = cls(database, encode, decode)
        await records._start()
        return records

    async def load_headers(self) -> LoadedAgents:
        return await self._db.read(partial(_load, self._decode, self._prompts))


def _write(
    prompts: QueuedContent, writes: list[KeyedWrite[Agent]], conn: sqlite3.Connection
) -> Written:
    """In the writer thread: the records, and the queued prompts' content they hold; what the
    queued-prompt table holds once committed."""
    AGENTS.write(writes, conn)
    return {
        w.key: prompts.delete(conn, w.key) if w.value is None else prompts.sync(conn, w.value)
        for w in writes
    }


def _load(decode: Decode, prompts: QueuedContent, conn: sqlite3.Connection) -> LoadedAgents:
    """In the reader thread: every record, decoded, in creation order, its prompts joined."""
    agents, bad = AGENTS.load(decode, conn)
    return LoadedAgents(prompts.load(conn, agents), [BadRecord(*b) for b in bad])


if TYPE_CHECKING:

    def _satisfies_the_protocol(records: SqliteAgentRecords) -> AgentRecords:
        return records
