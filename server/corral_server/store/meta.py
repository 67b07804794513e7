"""The store's `meta` table: small named facts about the whole store (schema.py lists them).

Must not: hold anything per agent or per row (those have their own tables).
"""

from __future__ import annotations

import sqlite3

from corral_server.store.database import Database

# The event log's incarnation: Subscribe revisions are only comparable within one.
EVENT_LOG_INCARNATION = "event_log_incarnation"


async def read_meta(database: Database, key: str) -> str | None:
    def run(conn: sqlite3.Connection) -> str | None:
        found = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if found is None else str(found[0])

    return await database.read(run)


async def write_meta(database: Database, key: str, value: str) -> None:
    def run(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    await database.write(run)
