"""Where schedules are kept: in memory (a daemon without a state directory), or in the
database's `schedules` table (store/schema.py), one record per schedule in the storage format
(store/format/schedules.py), written whole.

Must not: run SQLite on the event loop (Database.write and read run it in their threads).
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

from corral_server.domain.schedules import Schedule
from corral_server.store.database import Database
from corral_server.store.format.schedules import decode_schedule, encode_schedule


class ScheduleStore(Protocol):
    async def put(self, schedule: Schedule) -> None: ...

    async def delete(self, schedule_id: str) -> None: ...

    async def load(self) -> list[Schedule]: ...


class InMemorySchedules:
    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}  # encoded: what is kept is a copy

    async def put(self, schedule: Schedule) -> None:
        self._records[schedule.id] = encode_schedule(schedule)

    async def delete(self, schedule_id: str) -> None:
        self._records.pop(schedule_id, None)

    async def load(self) -> list[Schedule]:
        return [decode_schedule(record) for record in self._records.values()]


_UPSERT = (
    "INSERT INTO schedules (schedule_id, record, created_ms) VALUES (?, ?, ?)"
    " ON CONFLICT (schedule_id) DO UPDATE SET record = excluded.record"
)


class SqliteSchedules:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def put(self, schedule: Schedule) -> None:
        row = (schedule.id, encode_schedule(schedule), schedule.created_at_ms)
        await self._db.write(lambda conn: conn.execute(_UPSERT, row))

    async def delete(self, schedule_id: str) -> None:
        await self._db.write(
            lambda conn: conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,))
        )

    async def load(self) -> list[Schedule]:
        return await self._db.read(_load)


def _load(conn: sqlite3.Connection) -> list[Schedule]:
    rows = conn.execute("SELECT record FROM schedules ORDER BY created_ms, schedule_id")
    # A record the migration could not read is still its JSON text: refused, as any bad one.
    return [decode_schedule(_bytes(record)) for (record,) in rows]


def _bytes(record: bytes | str) -> bytes:
    return record.encode() if isinstance(record, str) else record
