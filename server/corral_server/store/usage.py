"""The SQLite usage ledger: `UsageLedger` (records/usage.py) in the `turn_usage` table
(schema v9). Entries wait on the loop (store/pending.py) and go to the database in the group
commit (store/commits.py), so a turn's entry commits with its agent's record or after it, never
before; reads add them up in the reader thread, with SQLite's GROUP BY.

Size: a row is ~100-150 bytes (two ids, provider, model, five numbers); a million completed
turns cost ~150 MB. Rows are never trimmed nor deleted: what was spent stays spent, through
rewinds, reloads and archives.

Must not: import protobuf or grpc, or run SQLite on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from functools import partial
from typing import TYPE_CHECKING

from corral_server.domain.agent import Usage
from corral_server.domain.usage import UsageEntry, UsageGroup
from corral_server.store.database import Database
from corral_server.store.pending import PendingWrites

if TYPE_CHECKING:
    from corral_server.records.usage import UsageLedger

_INSERT = (
    "INSERT INTO turn_usage (agent_id, turn_id, ended_ms, provider, model, input_tokens,"
    " output_tokens, cached_input_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_FINE = (
    "SELECT agent_id, provider, model, date(ended_ms / 1000, 'unixepoch'), sum(input_tokens),"
    " sum(output_tokens), sum(cached_input_tokens), sum(cost_usd), count(*) FROM turn_usage"
    " WHERE ended_ms >= ? AND ended_ms < ? GROUP BY 1, 2, 3, 4"
)
# Bounds that hold every timestamp: an unbounded side of a query.
_EARLIEST, _LATEST = -(2**62), 2**62


class SqliteUsageLedger:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._writes: PendingWrites[UsageEntry] = PendingWrites(
            database, lambda entries: partial(_write, entries)
        )

    def record(self, entry: UsageEntry) -> asyncio.Future[None]:
        return self._writes.add((entry,))

    async def fine(self, start_ms: int | None, end_ms: int | None) -> list[UsageGroup]:
        low = _EARLIEST if start_ms is None else start_ms
        high = _LATEST if end_ms is None else end_ms
        return await self._db.read(partial(_read, low, high))


def _write(entries: list[UsageEntry], conn: sqlite3.Connection) -> None:
    conn.executemany(
        _INSERT,
        [
            (
                e.agent_id,
                e.turn_id,
                e.ended_ms,
                e.provider,
                e.model,
                e.usage.input_tokens,
                e.usage.output_tokens,
                e.usage.cached_input_tokens,
                e.usage.cost_usd,
            )
            for e in entries
        ],
    )


def _read(low: int, high: int, conn: sqlite3.Connection) -> list[UsageGroup]:
    return [
        UsageGroup(agent, provider, model, day, Usage(int(i), int(o), int(c), float(cost)), n)
        for agent, provider, model, day, i, o, c, cost, n in conn.execute(_FINE, (low, high))
    ]


if TYPE_CHECKING:

    def _satisfies_the_protocol(ledger: SqliteUsageLedger) -> UsageLedger:
        return ledger  # mypy proves SqliteUsageLedger implements UsageLedger
