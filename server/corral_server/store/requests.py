"""The SQLite request ids and finished turns: `CreateRequests` and `FinishedTurns`
(records/store.py) in the `create_requests` and `finished_turns` tables.

Both keep nothing in memory but what is not committed yet and, for finished turns, the last
few turn ids of each agent (`recent_per_agent`): a late provider event almost always concerns
the turn that just ended, so `contains` answers it without a read; any other id is one point
query of the primary key. Writes wait on the loop (store/pending.py) and go to the database
as one job per commit (store/commits.py); reads see the caller's own writes before they
commit.

A failed commit fails the futures of its writes and keeps nothing of them, except that a
finished turn id stays in the recent cache: dropping a late event of a turn that did end is
the safe side (the actor's own failure path reports the failed write).

Sizes: a request id row is its id (<= the id limit), a 32-hex agent id, the fingerprint and a
timestamp, ~100-200 bytes; a million CreateAgents with ids cost ~150 MB. They are never
trimmed today (no window: a retry is answered however late); `created_ms` is stored so an
age-based trim is one DELETE when a limit is wanted. Finished turns are dropped with their
agent.

Must not: import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from corral_server.store.database import Database
from corral_server.store.pending import PendingWrites

if TYPE_CHECKING:
    from corral_server.records.store import CreateRequests, FinishedTurns

# Turn ids kept per agent for `contains` without a read: the turns whose late events still
# arrive (the last one, nearly always). 8 x ~40-byte ids stays far below the memory budget of
# 20 KB per idle agent (BENCHMARKS.md, P6).
RECENT_PER_AGENT = 8


class _Request(NamedTuple):
    request_id: str
    agent_id: str
    fingerprint: bytes
    created_ms: int


class SqliteCreateRequests:
    def __init__(self, database: Database) -> None:
        self._db = database
        # Not yet committed: queued and in the writer. Once settled, committed or failed
        # (not stored: a retry finds nothing), the database answers.
        self._writes: PendingWrites[_Request] = PendingWrites(
            database, lambda rows: partial(_remember, rows)
        )

    def remember(
        self, request_id: str, fingerprint: bytes, agent_id: str, created_ms: int
    ) -> asyncio.Future[None]:
        return self._writes.add((_Request(request_id, agent_id, fingerprint, created_ms),))

    async def find(self, request_id: str) -> tuple[bytes, str] | None:
        # The latest write of the id wins, as its upsert does.
        for known in (*reversed(self._writes.items), *reversed(self._writes.in_flight)):
            if known.request_id == request_id:
                return known.fingerprint, known.agent_id
        return await self._db.read(partial(_find, request_id))


def _remember(rows: list[_Request], conn: sqlite3.Connection) -> None:
    conn.executemany(
        "INSERT INTO create_requests (request_id, agent_id, fingerprint, created_ms)"
        " VALUES (?, ?, ?, ?) ON CONFLICT (request_id) DO UPDATE SET"
        " agent_id = excluded.agent_id, fingerprint = excluded.fingerprint,"
        " created_ms = excluded.created_ms",
        rows,
    )


def _find(request_id: str, conn: sqlite3.Connection) -> tuple[bytes, str] | None:
    found = conn.execute(
        "SELECT fingerprint, agent_id FROM create_requests WHERE request_id = ?", (request_id,)
    ).fetchone()
    return None if found is None else (bytes(found[0]), str(found[1]))


class _TurnOp(NamedTuple):
    agent_id: str
    turn_id: str | None  # None: drop every turn of the agent


class SqliteFinishedTurns:
    def __init__(self, database: Database, *, recent_per_agent: int = RECENT_PER_AGENT) -> None:
        if recent_per_agent < 1:
            raise ValueError(f"recent_per_agent must be at least 1, got {recent_per_agent}")
        self._db = database
        self._recent_per_agent = recent_per_agent
        # Per agent, its last turn ids added (a dict as an ordered set, oldest first),
        # committed or not. Invariant: every id added and not committed is here or in
        # the queue (`_writes`).
        self._recent: dict[str, dict[str, None]] = {}
        self._writes = PendingWrites(database, _write_job, self._settle)
        # Agents with a drop not committed yet -> how many: the database still holds their
        # old turns, so `contains` must not read it for them.
        self._dropping: dict[str, int] = {}

    def add(self, agent_id: str, turn_id: str) -> asyncio.Future[None]:
        recent = self._recent.setdefault(agent_id, {})
        recent[turn_id] = None
        if len(recent) > self._recent_per_agent:
            del recent[next(iter(recent))]
        return self._queue(_TurnOp(agent_id, turn_id))

    def drop(self, agent_id: str) -> asyncio.Future[None]:
        self._recent.pop(agent_id, None)
        self._dropping[agent_id] = self._dropping.get(agent_id, 0) + 1
        return self._queue(_TurnOp(agent_id, None))

    async def contains(self, agent_id: str, turn_id: str) -> bool:
        recent = self._recent.get(agent_id)
        if recent is not None and turn_id in recent:
            return True
        op = _TurnOp(agent_id, turn_id)
        waiting = self._writes.in_flight + self._writes.items
        if agent_id in self._dropping:  # only writes after the drop count: all in memory
            return _added_since_drop(waiting, op)
        if op in waiting:
            return True
        return await self._db.read(partial(_contains, op))

    def _queue(self, op: _TurnOp) -> asyncio.Future[None]:
        return self._writes.add((op,))

    def _settle(self, ops: list[_TurnOp], ok: bool, outcome: object) -> None:
        for op in ops:
            if op.turn_id is None:
                left = self._dropping[op.agent_id] - 1
                if left:
                    self._dropping[op.agent_id] = left
                else:
                    del self._dropping[op.agent_id]


def _added_since_drop(ops: list[_TurnOp], wanted: _TurnOp) -> bool:
    found = False
    for op in ops:
        if op.agent_id != wanted.agent_id:
            continue
        if op.turn_id is None:
            found = False
        elif op == wanted:
            found = True
    return found


def _write_job(ops: list[_TurnOp]) -> Callable[[sqlite3.Connection], None]:
    return partial(_write_turns, ops)


def _write_turns(ops: list[_TurnOp], conn: sqlite3.Connection) -> None:
    """In the writer thread, in call order: runs of adds as one executemany each."""
    adds: list[_TurnOp] = []
    for op in ops:
        if op.turn_id is not None:
            adds.append(op)
            continue
        _insert_turns(conn, adds)
        adds = []
        conn.execute("DELETE FROM finished_turns WHERE agent_id = ?", (op.agent_id,))
    _insert_turns(conn, adds)


def _insert_turns(conn: sqlite3.Connection, adds: list[_TurnOp]) -> None:
    if adds:
        conn.executemany(
            "INSERT OR IGNORE INTO finished_turns (agent_id, turn_id) VALUES (?, ?)", adds
        )


def _contains(op: _TurnOp, conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM finished_turns WHERE agent_id = ? AND turn_id = ?", op
    ).fetchone()
    return found is not None


if TYPE_CHECKING:

    def _satisfy(
        requests: SqliteCreateRequests, turns: SqliteFinishedTurns
    ) -> tuple[CreateRequests, FinishedTurns]:
        return requests, turns
